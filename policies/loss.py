"""The off-policy-corrected GRPO policy loss (a pure function of log-probs and advantages).

``policy_loss(inputs, cfg)`` returns the scalar loss and a dict of metrics. The trust region is
chosen by ``LossConfig``:

- token level (default): r_t = π_θ(y_t)/μ(y_t) against the *behaviour* policy that sampled the
  token, optionally clamped at δ (prime-rl / INTELLECT-2), then either PPO-clipped asymmetrically
  to [1−ε, 1+ε_high] (DAPO) or, when ``m2po_tau`` is set, left unclipped with M2PO's
  second-moment token mask instead.
- sequence level, and always for rollouts from a peer with another tokenizer: the truncated
  sequence weight w̄ = min(π_θ(y)/μ(y), c) is a constant factor on A·∇log π_θ(y) (VCPO's truncated
  importance sampling); token ratios are meaningless there because tokens do not align.

With ``external_success_floor = f`` a peer's row that this node's own scoring verified (right, and
exactly one answer block) and that has a positive advantage weighs at least f: the token ratio or w̄ that multiplies
A·∇log π_θ is max(weight, f), never above the trust region's upper bound (docs/algorithm.md,
section 10). Off by default.

With ``peer_sft_coef`` > 0 the rows marked ``supervised`` add a supervised term, the mean token
negative log-likelihood of each row times coef / ``peer_sft_rows`` (policies/supervised.py,
docs/algorithm.md section 11). Off by default, and then the loss is the one above, bit for bit.

Aggregation (TRL's ``loss_type`` names): ``grpo`` averages tokens per sequence then sequences,
``dapo`` averages over all tokens of the batch, ``dr_grpo`` divides the token sum by
B · max_completion_length.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Literal

import torch

from swarm_node.policies.offpolicy import (ess_fraction, m2po_mask, sequence_log_weights, success_floor, token_log_ratios,
                                truncated_weights)
from swarm_node.policies.supervised import row_nll, supervised_loss

__all__ = ["LossConfig", "LossInputs", "LossOutputs", "LossPlan", "ZERO_ADVANTAGE", "loss_denominator", "loss_plan", "policy_loss",
           "row_caps", "sequence_weights"]

_MAX_LOG_RATIO = 80.0  # e^80 ≈ 5.5e34 < float32 max ≈ 3.4e38
EXTERNAL_DELTA = 4.0  # the ratio clamp on peers' rows when learner.delta is off (INTELLECT-2's 4)
ZERO_ADVANTAGE = 1e-9  # |A| at or below this carries no gradient (a group whose rewards agree, up to rounding)


@dataclass(frozen=True)
class LossConfig:
    """The loss's settings. The defaults are a node's (node/config/config.py's learner section and
    generation.max_completion_length; tests/node/config/test_config.py holds them equal)."""

    importance_sampling_level: Literal["token", "sequence"] = "token"
    epsilon: float = 0.2  # lower PPO clip: r ≥ 1 − ε
    epsilon_high: float | None = 0.28  # upper PPO clip (DAPO); None = symmetric (uses ε)
    delta: float | None = 4.0  # clamp on the unclipped ratio before clipping (INTELLECT-2's 4); None = off
    m2po_tau: float | None = None  # M2PO second-moment bound; replaces PPO clipping when set
    weight_cap: float = 8.0  # c, truncation of sequence importance weights (VCPO)
    loss_type: Literal["grpo", "dapo", "dr_grpo"] = "dapo"
    max_completion_length: int = 16  # only for dr_grpo's constant normaliser
    external_success_floor: float | None = None  # f: least weight of a peer's verified row with A > 0; None = off
    peer_sft_coef: float = 0.0  # weight of the supervised term on the rows marked supervised; 0 = off
    peer_sft_rows: int = 8  # R: the most rows the supervised term takes a step, and its constant divisor

    @property
    def clip_high(self) -> float:
        """The upper PPO clip on a token ratio, 1 + ε_high (1 + ε when ε_high is None)."""
        return 1.0 + (self.epsilon if self.epsilon_high is None else self.epsilon_high)

    def __post_init__(self):
        f = self.external_success_floor
        if f is not None and not 0 < f <= 1:
            raise ValueError(f"external_success_floor must be in (0, 1] (none = off), got {f}")
        if not (math.isfinite(self.peer_sft_coef) and self.peer_sft_coef >= 0):
            raise ValueError(f"peer_sft_coef must be a finite number >= 0 (0 = off), got {self.peer_sft_coef}")
        if isinstance(self.peer_sft_rows, bool) or not isinstance(self.peer_sft_rows, int) or self.peer_sft_rows < 1:
            raise ValueError(f"peer_sft_rows must be an int >= 1, got {self.peer_sft_rows!r}")


@dataclass
class LossInputs:
    logp: torch.Tensor  # (B, T) log π_θ of completion tokens, with grad
    behaviour_logp: torch.Tensor  # (B, T) log μ per token (any value on sequence-level rows)
    behaviour_seq_logp: torch.Tensor  # (B,) Σ_t log μ as reported by the sampler
    mask: torch.Tensor  # (B, T) 1.0 on completion tokens
    advantages: torch.Tensor  # (B,)
    sample_mask: torch.Tensor  # (B,) bool, False = excluded (MC-GRPO pivot)
    sequence_level: torch.Tensor  # (B,) bool, True = must use the sequence ratio (foreign tokenizer)
    seq_weights: torch.Tensor  # (B,) truncated sequence weights w̄, detached (see sequence_weights)
    external: torch.Tensor | None = None  # (B,) bool, True = a peer's row (its log μ is a claim)
    # (B,) bool, True = this node's scoring found the row right and exactly one answer block
    # (TrainSample.verified); None = no row is (the floor lifts nothing)
    verified: torch.Tensor | None = None
    # (B,) bool, True = a row the supervised term takes (TrainSample.supervised); None = none
    supervised: torch.Tensor | None = None
    # (B,) bool, True = a row in the batch for the supervised term alone (its group carries no GRPO
    # gradient: the learner would have left it out, policies/inert_rows.py). The GRPO diagnostics
    # leave it out, so they are the same with the term on or off; None = none
    term_only: torch.Tensor | None = None

    def rows(self, sl: slice | torch.Tensor, cols: int | None = None) -> "LossInputs":
        """These rows only (a micro-batch: a slice or row indices), and of the (B, T) tensors the
        first ``cols`` columns (a pass laid out at its own width, ``TokenBatch.take``)."""
        return LossInputs(**{f.name: _rows(getattr(self, f.name), sl, cols) for f in dataclasses.fields(self)})


@dataclass(frozen=True)
class LossOutputs:
    loss: torch.Tensor  # scalar
    metrics: dict[str, float | None]


def sequence_weights(logp: torch.Tensor, mask: torch.Tensor, behaviour_seq_logp: torch.Tensor,
                     cap: float | torch.Tensor) -> torch.Tensor:
    """w̄_i = min(π_θ(y_i)/μ(y_i), c_i), detached: the one place sequence weights are computed.

    They feed the ESS learning-rate rule, the OPOB baseline and the sequence-level loss. ``cap``
    is c for every row or per-row caps (``row_caps``).
    """
    return truncated_weights(sequence_log_weights(logp.detach(), mask, behaviour_seq_logp), cap)


def row_caps(cfg: LossConfig, foreign: torch.Tensor, local: torch.Tensor) -> torch.Tensor:
    """Per-row truncation caps c_i of the sequence weights.

    A peer's row with another tokenizer can only use the sequence weight, and its Σ log μ is the
    peer's claim: at VCPO's c = 8 a lie about it would buy 8x the weight an honest peer's row gets
    on the token path, where PPO clipping holds each ratio to 1 + ε_high. So, on the token path,
    such rows are capped at 1 + ε_high: lying buys nothing over the token path. With
    ``importance_sampling_level = "sequence"`` every row is weighted by w̄ ≤ c, honest stale
    ones too, and c stays the cap for all.
    """
    caps = torch.full(foreign.shape, float(cfg.weight_cap), device=foreign.device)
    if cfg.importance_sampling_level == "token":
        caps = torch.where(foreign & ~local, torch.clamp(caps, max=cfg.clip_high), caps)
    return caps


@dataclass(frozen=True)
class LossPlan:
    """What the loss needs from the whole batch: M2PO's kept tokens, the normaliser and the
    metrics. Computed once from values (no grad), so a batch split into micro-batches gets the
    loss, and the summed gradient, of the batch in one pass (``policy_loss(inputs.rows(sl), cfg,
    plan.rows(sl))`` summed over the slices)."""

    m2po_keep: torch.Tensor | None  # (B, T) tokens M2PO keeps on the token path; None = no M2PO
    denominator: torch.Tensor  # scalar: dapo Σ used tokens, grpo the sequences used, dr_grpo B·L
    metrics: dict[str, float | None]

    def rows(self, sl: slice | torch.Tensor, cols: int | None = None) -> "LossPlan":
        return LossPlan(_rows(self.m2po_keep, sl, cols), self.denominator, self.metrics)


def _rows(x: torch.Tensor | None, sl: slice | torch.Tensor, cols: int | None) -> torch.Tensor | None:
    """Rows ``sl`` of a per-row tensor, and of a (B, T) one its first ``cols`` columns."""
    if x is None:
        return None
    x = x[sl.to(x.device) if isinstance(sl, torch.Tensor) else sl]
    return x[:, :cols] if cols is not None and x.dim() == 2 else x


def _terms(x: LossInputs, cfg: LossConfig):
    """Token-path ratios and masks shared by the plan and the loss (one definition of each)."""
    mask = x.mask * x.sample_mask.to(x.mask.dtype).unsqueeze(-1)  # (B, T)
    adv = x.advantages.to(x.logp.dtype).unsqueeze(-1)  # (B, 1)
    seq_rows = x.sequence_level.clone()
    if cfg.importance_sampling_level == "sequence":
        seq_rows[:] = True
    seq_f = seq_rows.to(x.logp.dtype).unsqueeze(-1)  # (B, 1)
    # Token level: PPO / clamp / M2PO on r_t against the behaviour policy. (torch.where, never
    # a product with a 0/1 mask, wherever a value may be infinite: inf·0 is NaN.)
    log_r = torch.where(seq_f > 0, torch.zeros_like(x.logp), token_log_ratios(x.logp, x.behaviour_logp, x.mask))
    # Bound log r before exp: a ratio above e^88 is inf in float32, and inf·0 (a token M2PO drops,
    # a saturated δ clamp or PPO clip) makes the loss and every gradient NaN. Values and gradients
    # are unchanged for any log r ≤ _MAX_LOG_RATIO.
    ratio = torch.exp(torch.clamp(log_r, max=_MAX_LOG_RATIO))
    unclipped = ratio if cfg.delta is None else torch.clamp(ratio, max=cfg.delta)
    if cfg.delta is None and x.external is not None:
        # PPO does not bound r_t from above when A < 0: with δ off, a peer claiming a low log μ
        # would get an unbounded gradient. Its rows keep the default clamp whatever the config.
        ext = x.external.unsqueeze(-1) & torch.ones_like(ratio, dtype=torch.bool)
        unclipped = torch.where(ext, torch.clamp(ratio, max=EXTERNAL_DELTA), ratio)
    token_mask = mask * (1 - seq_f)
    return mask, adv, seq_rows, seq_f, log_r, ratio, unclipped, token_mask


def _successes(x: LossInputs) -> torch.Tensor:
    """(B,) bool: peers' successes, the rows from a peer that this node's scoring verified (right,
    exactly one answer block) and that the loss uses with A > 0. A positive advantage alone is not
    enough: the sender composes its group, so a wrong but well-formed answer among malformed ones,
    or a right answer wrapped in other text, has one too."""
    if x.external is None or x.verified is None:
        return torch.zeros_like(x.sample_mask)
    return x.external & x.verified & x.sample_mask & (x.advantages > ZERO_ADVANTAGE)


def _floored(x: LossInputs, cfg: LossConfig, ratio: torch.Tensor, seq_rows: torch.Tensor):
    """``external_success_floor`` on peers' successes: (token weights, tokens lifted, sequence
    weights, rows lifted), or None when it is off. The floor never exceeds what a
    positive-advantage weight can reach anyway: the δ clamp (a peer's rows keep EXTERNAL_DELTA
    with δ off) and, with PPO clipping, 1 + ε_high on the token path; the row's cap c_i on the
    sequence path."""
    f = cfg.external_success_floor
    if f is None or x.external is None:
        return None
    rows = _successes(x)
    top = cfg.delta if cfg.delta is not None else EXTERNAL_DELTA
    if cfg.m2po_tau is None:
        top = min(top, cfg.clip_high)
    tok_w, tok_lifted = success_floor(ratio.detach(), min(f, top), (rows & ~seq_rows).unsqueeze(-1))
    caps = row_caps(cfg, x.sequence_level, ~x.external)
    seq_w, seq_lifted = success_floor(x.seq_weights, torch.clamp(caps, max=f), rows & seq_rows)
    return tok_w, tok_lifted, seq_w, seq_lifted


def _success_metrics(x: LossInputs, cfg: LossConfig, ratio, seq_f, token_mask, floored) -> dict:
    """What the correction does to peers' successes (docs/metrics.md): their share of the rows,
    the mean weight of their tokens (r_t, or w̄ on every token of a sequence-level row), the
    share of those below 1 − ε, the share the floor lifted, and the ESS fraction of their w̄.
    None where they have no rows (tokens)."""
    pos = _successes(x)
    n = int(pos.sum())
    out: dict[str, float | None] = {"ext_pos_rows": float(n), "ext_pos_frac": n / max(1, pos.numel()),
                                    "ext_pos_weight_mean": None, "ext_pos_low_frac": None,
                                    "ext_pos_floored_frac": None, "ext_pos_ess": None}
    if n == 0:
        return out
    out["ext_pos_ess"] = ess_fraction(x.seq_weights[pos])
    toks = (x.mask > 0) & pos.unsqueeze(-1)
    if not bool(toks.any()):
        return out
    w = torch.where(seq_f > 0, x.seq_weights.unsqueeze(-1).to(ratio.dtype).expand_as(ratio), ratio)[toks]
    lifted = torch.zeros_like(toks)
    if floored is not None:
        lifted = torch.where(seq_f > 0, floored[3].unsqueeze(-1), floored[1] & (token_mask > 0))
    out.update(ext_pos_weight_mean=float(w.mean()), ext_pos_low_frac=float((w < 1 - cfg.epsilon).float().mean()),
               ext_pos_floored_frac=float(lifted[toks].float().mean()))
    return out


def loss_denominator(used: torch.Tensor, cfg: LossConfig) -> torch.Tensor:
    """What the loss's token sum is divided by, from ``used`` ((B, T), the tokens the loss takes):
    dapo Σ used tokens, grpo the sequences used, dr_grpo B · max_completion_length."""
    if cfg.loss_type == "dapo":
        return used.sum().clamp(min=1)
    if cfg.loss_type == "grpo":
        return (used.sum(-1) > 0).sum().clamp(min=1).to(used.dtype)
    if cfg.loss_type == "dr_grpo":
        return torch.tensor(float(used.shape[0] * cfg.max_completion_length), device=used.device)
    raise ValueError(f"unknown loss_type {cfg.loss_type!r}; choose grpo, dapo or dr_grpo")


def loss_plan(inputs: LossInputs, cfg: LossConfig) -> LossPlan:
    """The batch-level part of the loss, from the values of ``inputs`` (its log-probs detached). Its
    GRPO diagnostics (``clip_frac``, ``ratio_mean``, ``weight_mean``, ``seq_level_frac``,
    ``ext_pos_*``) are over the rows that are not ``term_only``; with none such left, those of no
    row (the learner puts an inert batch's in their place)."""
    x = _detached(inputs)
    keep, denominator, metrics = _plan_parts(x, cfg)
    if x.term_only is not None and bool(x.term_only.any()):
        metrics = _plan_parts(x.rows((~x.term_only).nonzero(as_tuple=True)[0]), cfg)[2]
    if cfg.peer_sft_coef > 0:
        metrics.update(_supervised_metrics(x, cfg))
    return LossPlan(keep, denominator, metrics)


def _plan_parts(x: LossInputs, cfg: LossConfig) -> tuple[torch.Tensor | None, torch.Tensor, dict]:
    """M2PO's kept tokens (None without M2PO), the normaliser and the GRPO diagnostics of ``x``'s rows."""
    mask, adv, seq_rows, seq_f, log_r, ratio, unclipped, token_mask = _terms(x, cfg)
    keep = None
    if cfg.m2po_tau is not None:
        keep = m2po_mask(log_r, token_mask, cfg.m2po_tau)
        m2po_dropped = float((token_mask - keep).sum() / token_mask.sum().clamp(min=1))
        token_mask = keep
        clipped_frac = 0.0
    else:
        clipped = torch.clamp(ratio, 1 - cfg.epsilon, cfg.clip_high)
        was_clipped = (clipped * adv < unclipped * adv).to(mask.dtype) * token_mask
        clipped_frac = float(was_clipped.sum() / token_mask.sum().clamp(min=1))
        m2po_dropped = 0.0
    denominator = loss_denominator(token_mask + mask * seq_f, cfg)  # the tokens that carry gradient
    w = x.seq_weights
    live = x.mask.sum() > 0
    metrics = {
        "clip_frac": clipped_frac,
        "m2po_masked_frac": m2po_dropped,
        "ratio_mean": float((ratio * x.mask).sum() / x.mask.sum()) if live else 1.0,
        "weight_mean": float(w.mean()) if w.numel() else 0.0,
        "seq_level_frac": float(seq_rows.float().mean()) if seq_rows.numel() else 0.0,
        **_success_metrics(x, cfg, ratio, seq_f, token_mask, _floored(x, cfg, ratio, seq_rows)),
    }
    return keep, denominator, metrics


def _supervised_metrics(x: LossInputs, cfg: LossConfig) -> dict[str, float | None]:
    """The supervised term's rows (``peer_sft_rows``) and their mean token NLL (``peer_sft_nll``,
    before the coefficient; None with no row). Refuses a batch whose marked rows break the
    term's bounds: more than R of them, or one that is not a peer's row this node verified (the
    node chose them, node/run/peer_sft.py; this only holds it to what it chose by)."""
    rows = x.supervised if x.supervised is not None else torch.zeros_like(x.sample_mask)
    n = int(rows.sum())
    if n > cfg.peer_sft_rows:
        raise ValueError(f"{n} rows marked supervised, more than peer_sft_rows = {cfg.peer_sft_rows}")
    if n and (x.external is None or x.verified is None or bool((rows & ~(x.external & x.verified)).any())):
        raise ValueError("a row marked supervised is not a peer's row this node verified")
    nll = row_nll(x.logp, x.mask, rows)
    return {"peer_sft_rows": float(n), "peer_sft_nll": float(nll[rows].mean()) if n else None}


def _detached(x: LossInputs) -> LossInputs:
    return dataclasses.replace(x, logp=x.logp.detach())


def policy_loss(inputs: LossInputs, cfg: LossConfig, plan: LossPlan | None = None) -> LossOutputs:
    """The loss of ``inputs``' rows. Without ``plan`` they are the whole batch; with one (from
    ``loss_plan`` over the whole batch, sliced to these rows) they are a micro-batch of it, and
    the micro-batches' losses sum to the whole batch's."""
    x = inputs
    if plan is None:
        plan = loss_plan(x, cfg)
    mask, adv, seq_rows, seq_f, log_r, ratio, unclipped, token_mask = _terms(x, cfg)
    if plan.m2po_keep is not None:
        token_mask = plan.m2po_keep
        token_obj = unclipped * adv
    else:
        clipped = torch.clamp(ratio, 1 - cfg.epsilon, cfg.clip_high)
        token_obj = torch.minimum(unclipped * adv, clipped * adv)
    seq_w = x.seq_weights
    floored = _floored(x, cfg, ratio, seq_rows)
    if floored is not None:
        # A lifted token's weight is the constant f, as w̄ is below: gradient f·A·∇log π_θ.
        tok_w, lifted, seq_w, _ = floored
        token_obj = torch.where(lifted, tok_w * torch.exp(x.logp - x.logp.detach()) * adv, token_obj)

    # Sequence level: w̄ · A · ∇log π_θ(y_t), written so the value is w̄·A and the gradient flows
    # through log π_θ only.
    seq_obj = seq_w.unsqueeze(-1) * torch.exp(x.logp - x.logp.detach()) * adv

    zero = torch.zeros_like(x.logp)
    per_token = -(torch.where(token_mask > 0, token_obj, zero) + torch.where(mask * seq_f > 0, seq_obj, zero))
    if cfg.loss_type == "grpo":
        used = token_mask + mask * seq_f  # (B, T) tokens that carry gradient
        numerator = (per_token.sum(-1) / used.sum(-1).clamp(min=1)).sum()
    else:
        numerator = per_token.sum()
    loss = numerator / plan.denominator
    if cfg.peer_sft_coef > 0 and x.supervised is not None and bool(x.supervised.any()):
        loss = loss + supervised_loss(x.logp, x.mask, x.supervised, cfg.peer_sft_coef, cfg.peer_sft_rows)
    return LossOutputs(loss=loss, metrics=plan.metrics)
