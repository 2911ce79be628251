"""Off-policy correction maths: importance ratios, truncated sequence weights, ESS, LR scaling.

Pure tensor functions with no model, optimizer or I/O, so each formula can be checked with
hand-computed numbers (tests/policies/test_offpolicy.py). Notation follows docs/algorithm.md:
π_θ is the policy being trained, μ the behaviour policy that sampled the rollout (an older
version of this node, or a peer).

Shapes: B completions in the batch, T completion tokens (right-padded), ``mask`` is 1.0 on real
completion tokens and 0.0 on padding.
"""

from __future__ import annotations

import math
from typing import Literal

import torch

LrRule = Literal["none", "sqrt", "linear", "count"]

__all__ = [
    "LrRule",
    "token_log_ratios",
    "sequence_log_weights",
    "truncated_weights",
    "effective_sample_size",
    "ess_fraction",
    "ess_fraction_by_source",
    "lr_factor",
    "m2po_mask",
    "success_floor",
]


def token_log_ratios(
    logp: torch.Tensor,  # (B, T) log π_θ(y_t | x, y_<t)
    behaviour_logp: torch.Tensor,  # (B, T) log μ(y_t | x, y_<t)
    mask: torch.Tensor,  # (B, T)
) -> torch.Tensor:  # (B, T)
    """log r_t = log π_θ − log μ on real tokens, 0 on padding (so exp gives ratio 1 there).

    ``torch.where``, not a product with the mask: an infinite value where the mask is 0 would
    make inf·0 = NaN (and NaN gradients) instead of 0."""
    return torch.where(mask > 0, logp - behaviour_logp, torch.zeros_like(logp))


def sequence_log_weights(
    logp: torch.Tensor,  # (B, T)
    mask: torch.Tensor,  # (B, T)
    behaviour_seq_logp: torch.Tensor,  # (B,) Σ_t log μ(y_t | ...), as reported with the rollout
) -> torch.Tensor:  # (B,)
    """log w = Σ_t log π_θ(y_t) − log μ(y).

    Taking μ's *sequence* log-prob (not per-token values) lets the same formula cover rollouts
    from a peer with another tokenizer: their token log-probs do not align with ours, but both
    sums are log-probabilities of the same string (assuming canonical tokenization).
    """
    return torch.where(mask > 0, logp, torch.zeros_like(logp)).sum(dim=-1) - behaviour_seq_logp


def truncated_weights(log_w: torch.Tensor, cap: float | torch.Tensor) -> torch.Tensor:
    """w̄ = min(exp(log w), c): truncated importance sampling (VCPO uses c = 8). ``cap`` is one
    c for every row, or a (B,) tensor of per-row caps.

    Clamping in log space first avoids overflow to inf for very stale rollouts.
    """
    if isinstance(cap, torch.Tensor):
        if bool((cap <= 0).any()):
            raise ValueError("truncation caps must be > 0")
        return torch.exp(torch.minimum(log_w, torch.log(cap.to(log_w.dtype))))
    if cap <= 0:
        raise ValueError(f"truncation cap must be > 0, got {cap}")
    return torch.exp(torch.clamp(log_w, max=math.log(cap)))


def effective_sample_size(w: torch.Tensor) -> float:
    """ESS = (Σ w)² / Σ w²; 0 for an empty or all-zero batch."""
    w = w.detach().double()
    denom = float((w * w).sum())
    if denom == 0.0:
        return 0.0
    return float(w.sum()) ** 2 / denom


def ess_fraction(w: torch.Tensor, rows: torch.Tensor | None = None) -> float:
    """ρ = ESS / B ∈ (0, 1]: 1 when all weights are equal, 1/B when one sample carries all.

    ``rows`` (bool, (B,)) restricts it to the rows that carry gradient: a row whose advantage is
    0 (a group whose rewards agree) or that the loss leaves out (an MC-GRPO pivot) does not move
    the update, so it must not move ρ and the learning rate either; otherwise any peer could
    lower the whole batch's LR with weightless rows. With no such row, ρ = 1: nothing to correct.
    """
    if rows is not None:
        if not bool(rows.any()):
            return 1.0
        w = w[rows]
    if w.numel() == 0:
        return 0.0
    return effective_sample_size(w) / w.numel()


def ess_fraction_by_source(w: torch.Tensor, sources: torch.Tensor, rows: torch.Tensor | None = None) -> float:
    """ρ = Σ_s ESS_s / Σ_s n_s = Σ_s n_s ρ_s / Σ_s n_s: the ESS of a batch mixing behaviour policies.

    ``sources`` ((B,), integer ids) says which behaviour policy sampled each row: this node's own
    rows form one source, each peer another (docs/algorithm.md, "ESS"). Each source's ESS is
    computed from its own weights; the batch's is their sum, the ESS of the inverse-variance
    combination of the per-source estimates. Pooling all weights instead lets one peer, through
    the log μ it claims, set the scale of its weights against everyone else's and pull the whole
    batch's ρ (and LR) down; here a source lowers ρ by at most its share n_s/N of the rows. A
    source whose weights are all 0 has ESS_s = 0 (its rows count, it brings no effective sample):
    never NaN. One source gives exactly ``ess_fraction``. ``rows`` as in ``ess_fraction``.
    """
    if sources.shape != w.shape:
        raise ValueError(f"sources {tuple(sources.shape)} and weights {tuple(w.shape)} differ in shape")
    w = w.detach().double()
    sources = sources.to(w.device)  # segment ids on the weights' device: no CPU/CUDA mixing
    if rows is not None:
        rows = rows.to(w.device)
        if not bool(rows.any()):
            return 1.0
        w, sources = w[rows], sources[rows]
    if w.numel() == 0:
        return 0.0
    _, seg = torch.unique(sources, return_inverse=True)  # ids → 0..S-1
    n_src = int(seg.max()) + 1
    total = torch.zeros(n_src, dtype=w.dtype, device=w.device).index_add_(0, seg, w)
    sq = torch.zeros(n_src, dtype=w.dtype, device=w.device).index_add_(0, seg, w * w)
    # where() with a safe denominator: an all-zero source gives 0, not 0/0.
    ess = torch.where(sq > 0, total * total / torch.where(sq > 0, sq, torch.ones_like(sq)),
                      torch.zeros_like(sq))
    return float(ess.sum()) / w.numel()


def lr_factor(rho: float, rule: LrRule = "sqrt", rho_ref: float = 1.0, floor: float = 0.0, *,
              ess: float | None = None, ess_ref: float = 0.0, cap: float = 1.0) -> float:
    """The factor applied to the base learning rate for a batch with ESS fraction ρ.

    sqrt:   sqrt(min(1, ρ / ρ_ref))     linear: min(1, ρ / ρ_ref)     none: 1   (VCPO: ≤ 1)
    count:  min(cap, sqrt(ESS / ESS_ref)), ESS the batch's effective gradient rows (ρ times the
            rows that carry gradient), ESS_ref the rows a step of the node's own groups carries:
            the square-root batch rule under Adam, on the effective sample count, so a step with
            twice the effective samples may go √2 further (never past ``cap``, whatever peers send),
            and one with few informative rows goes less far.
    The result is never below ``floor`` so a pathological batch slows learning but never
    freezes it when the user asks for that.
    """
    if rho_ref <= 0:
        raise ValueError(f"rho_ref must be > 0, got {rho_ref}")
    if not 0.0 <= floor <= 1.0:
        raise ValueError(f"lr floor must be in [0, 1], got {floor}")
    x = min(1.0, max(0.0, rho) / rho_ref)
    if rule == "sqrt":
        f = math.sqrt(x)
    elif rule == "linear":
        f = x
    elif rule == "none":
        f = 1.0
    elif rule == "count":
        if ess is None or not ess_ref > 0:
            raise ValueError(f"the count rule needs the batch's ESS and an ESS_ref > 0 (got {ess}, {ess_ref})")
        if not cap >= 1.0:
            raise ValueError(f"lr cap must be >= 1, got {cap}")
        f = min(cap, math.sqrt(max(0.0, ess) / ess_ref))
    else:
        raise ValueError(f"unknown lr rule {rule!r}; choose 'sqrt', 'linear', 'count' or 'none'")
    return max(floor, f)


def m2po_mask(
    log_ratio: torch.Tensor,  # (B, T)
    mask: torch.Tensor,  # (B, T)
    tau: float,
) -> torch.Tensor:  # (B, T)
    """M2PO's second-moment trust region: drop the tokens with the largest (log r_t)² until the
    mean of (log r_t)² over the kept tokens is ≤ τ. Returns the reduced mask.

    Unlike PPO clipping this keeps every token whose ratio is moderate, however stale the data,
    and removes only the outliers that drive the variance.
    """
    if tau < 0:
        raise ValueError(f"m2po tau must be >= 0, got {tau}")
    m2 = (log_ratio.detach() ** 2).flatten()
    live = mask.flatten() > 0
    vals = m2[live]
    n = vals.numel()
    if n == 0 or float(vals.mean()) <= tau:
        return mask
    # Keep the k smallest values for the largest k whose mean is ≤ τ (prefix means of the
    # ascending sort are non-decreasing, so a cumulative sum finds k at once).
    sorted_vals, order = torch.sort(vals)
    prefix_mean = torch.cumsum(sorted_vals, 0) / torch.arange(1, n + 1, dtype=vals.dtype, device=vals.device)
    k = int((prefix_mean <= tau).sum())
    keep_live = torch.zeros(n, dtype=torch.bool, device=vals.device)
    keep_live[order[:k]] = True
    keep = torch.zeros_like(live)
    keep[live.nonzero(as_tuple=True)[0]] = keep_live
    return (keep.view_as(mask)).to(mask.dtype)


def success_floor(
    weight: torch.Tensor,  # importance weights (r_t per token, or w̄ per row), detached
    floor: float | torch.Tensor,  # f, or per-element floors already bounded by the caller's caps
    rows: torch.Tensor,  # bool, broadcastable to ``weight``: a peer's rows with A > 0
) -> tuple[torch.Tensor, torch.Tensor]:
    """(max(weight, f) on ``rows`` and ``weight`` elsewhere, where the floor lifted it).

    A peer's verified-correct completion that this node would rarely sample has a tiny ratio,
    so the correction all but drops what it teaches; the floor keeps its weight at f at least
    (docs/algorithm.md, "Peers' successes"). Bounding f by the trust region's upper bounds is
    the caller's job: only it knows them.
    """
    floor = torch.as_tensor(floor, dtype=weight.dtype, device=weight.device)
    lifted = rows & (weight < floor)
    return torch.where(lifted, floor, weight), lifted
