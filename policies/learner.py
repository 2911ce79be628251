"""The learner: one off-policy-corrected GRPO update of a ``Policy`` from a batch of samples.

It owns the optimizer and the policy version counter. Per step:

1. one forward pass with grad gives log π_θ of every completion token (of the rows that can carry
   gradient: rows of groups whose rewards are all equal are left out, policies/inert_rows.py);
2. from its detached values: truncated sequence weights w̄, ESS, ρ = ESS/B (summed per behaviour
   source: this node, each peer) and the VCPO learning rate factor (``policies.offpolicy``);
   group advantages with the chosen baseline (``policies.advantages``), which may use w̄ (and,
   for exact OPOB, per-sample gradient norms);
3. the policy loss with its trust region (``policies.loss``), plus, with ``peer_sft_coef`` > 0,
   the supervised term on the rows marked ``supervised`` (``policies.supervised``), backward,
   clip, AdamW step at ``learning_rate · lr_factor`` (· the term's ``lr_scale`` where it is all the gradient).

Corrections reuse the one forward pass, so a corrected step costs about what a plain GRPO step
costs (scripts/bench_learner.py measures it). Exact OPOB is the exception: it needs one extra
backward per sample and says so in its name.

With ``micro_batch_size`` rows or ``micro_batch_tokens`` padded tokens a pass (or after an
out-of-memory error halves the rows: ``policies.oom``) the batch runs in passes of rows of about
one length, each at its own width (``policies.micro_batches``): a forward pass without grad gives
the values step 2 and the loss's batch-level terms need (``loss_plan``: M2PO's mask, the
normaliser), then each pass's forward and backward accumulate the batch's gradient exactly, for
one more forward pass than the whole batch costs.
"""

from __future__ import annotations

import dataclasses
import logging
import math
from dataclasses import dataclass

import torch

from swarm_node.policies.advantages import Advantages, group_advantages
from swarm_node.policies.inert_rows import (inert_loss_metrics, live_rows, rewards_only_advantages, skippable,
                                            whole_batch_denominator)
from swarm_node.policies.micro_batches import Pass, plan_passes
from swarm_node.policies.loss import (ZERO_ADVANTAGE, LossConfig, LossInputs, loss_plan, policy_loss, row_caps,
                           sequence_weights)
from swarm_node.policies.oom import OutOfMemory, fit_by_halving, is_out_of_memory
from swarm_node.policies.offpolicy import ess_fraction, ess_fraction_by_source, lr_factor
from swarm_node.policies.policy import Policy, TokenBatch
from swarm_node.policies.supervised import lr_scale

log = logging.getLogger(__name__)

__all__ = ["TrainSample", "Learner", "LOCAL_SOURCE", "sample_source"]

_OOM_HINT = ("lower generation.prompts_per_step, generation.num_generations or "
             "generation.max_completion_length, train a LoRA adapter (model.lora_rank), or use a smaller model")


@dataclass(frozen=True)
class TrainSample:
    """One scored completion, ready for the learner."""

    group: str  # prompt identity (task id): completions with equal groups share a baseline
    prompt_ids: tuple[int, ...]  # in *this* policy's tokenizer
    completion_ids: tuple[int, ...]  # in this policy's tokenizer
    behaviour_logprobs: tuple[float, ...] | None  # per token; None when tokens do not align
    behaviour_seq_logprob: float  # Σ_t log μ, as reported by whoever sampled it
    reward: float  # recomputed by this node, never a peer's claim
    policy_version: int = 0  # version of the behaviour policy
    local: bool = True  # sampled by this node (vs. received from a peer)
    source: str | None = None  # the peer that sent it (its peer id); see ``sample_source``
    # This node's scoring found it right and exactly one answer block (the best a completion can
    # score): the only rows learner.external_success_floor may lift (docs/algorithm.md, section 10).
    verified: bool = False
    # Chosen for the supervised term (learner.peer_sft_coef, docs/algorithm.md section 11) by
    # node/run/peer_sft.py: a peer's verified row for a kind of question this node gets all wrong.
    # The loss refuses it on any other row.
    supervised: bool = False

    @property
    def foreign_tokens(self) -> bool:
        return self.behaviour_logprobs is None


LOCAL_SOURCE = ""  # peer ids are never empty, so this node's own rows cannot collide with a peer's


def sample_source(s: TrainSample) -> str:
    """The behaviour source a sample's ESS is computed in: this node's rows form one source, each
    peer is another (a different behaviour policy). For a peer's row without ``source``, the
    sender is read from its group, which node/run/rollouts.py builds as ``PeerGroup.key`` =
    "sender/round/task" from the verified sender (peer ids hold no "/")."""
    if s.local:
        return LOCAL_SOURCE
    if s.source is not None:
        return s.source
    return s.group.split("/", 1)[0]


class Learner:
    def __init__(self, policy: Policy, *, learning_rate: float, weight_decay: float = 0.0,
                 max_grad_norm: float = 1.0, num_iterations: int = 1, baseline: str = "mean",
                 scale_rewards: str = "none", lr_rule: str = "sqrt", rho_ref: float = 1.0,
                 lr_floor: float = 0.0, ess_ref: float = 0.0, lr_cap: float = 2.0,
                 warmup_steps: int = 20, temperature: float = 1.0,
                 loss: LossConfig = LossConfig(), off_policy_correction: bool = True,
                 micro_batch_size: int = 0, micro_batch_tokens: int = 0):
        self.policy = policy
        self.params = [p for p in policy.model.parameters() if p.requires_grad]
        if not self.params:
            raise ValueError("the policy has no trainable parameters")
        self.optimizer = torch.optim.AdamW(self.params, lr=learning_rate, weight_decay=weight_decay)
        self.base_lr = learning_rate
        self.weight_decay = weight_decay
        self.max_grad_norm = max_grad_norm
        self.num_iterations = num_iterations
        self.baseline = baseline
        self.scale_rewards = scale_rewards
        self.lr_rule = lr_rule
        self.rho_ref = rho_ref
        self.lr_floor = lr_floor
        # The count rule's reference ESS (the rows of the node's own groups a step) and its cap.
        self.ess_ref, self.lr_cap = ess_ref, lr_cap
        if lr_rule == "count":
            lr_factor(1.0, lr_rule, rho_ref, lr_floor, ess=ess_ref, ess_ref=ess_ref, cap=lr_cap)  # refuses bad values now
        self.warmup_steps = warmup_steps
        self.temperature = temperature
        self.loss_cfg = loss
        # False: every sample is treated as drawn from the current policy (naive sharing, as
        # rl-swarm does): no importance ratios against μ, ESS = B. For comparisons only.
        self.off_policy_correction = off_policy_correction
        self.version = 0  # number of optimizer updates applied to the policy
        # Rows per forward/backward pass (0 = the whole batch): gradients are accumulated over
        # micro-batches to the whole batch's exactly. Halved for good on out-of-memory.
        self.micro_batch_size = micro_batch_size
        # Padded tokens per pass (0 = no bound): a pass's memory follows its tokens, not its rows.
        self.micro_batch_tokens = micro_batch_tokens
        self.oom_halvings = 0

    def _batch(self, samples: list[TrainSample]) -> "_Rows":
        pad = int(self.policy.tokenizer.pad_token_id)
        batch = TokenBatch.build([s.prompt_ids for s in samples],
                                 [s.completion_ids for s in samples], pad)
        B, T = batch.completion_mask.shape
        host = dict(device="cpu")  # built on the host, moved once below, whatever the default device
        beh = torch.zeros(B, T, **host)
        for i, s in enumerate(samples):
            if s.behaviour_logprobs is not None:
                if len(s.behaviour_logprobs) != len(s.completion_ids):
                    raise ValueError(f"sample {i}: {len(s.behaviour_logprobs)} log-probs for "
                                     f"{len(s.completion_ids)} tokens")
                beh[i, :len(s.behaviour_logprobs)] = torch.tensor(s.behaviour_logprobs, **host)
        seq_beh = torch.tensor([s.behaviour_seq_logprob for s in samples], dtype=torch.float32, **host)
        foreign = torch.tensor([s.foreign_tokens for s in samples], dtype=torch.bool, **host)
        local = torch.tensor([s.local for s in samples], dtype=torch.bool, **host)
        verified = torch.tensor([s.verified for s in samples], dtype=torch.bool, **host)
        supervised = torch.tensor([s.supervised for s in samples], dtype=torch.bool, **host)
        rewards = torch.tensor([s.reward for s in samples], dtype=torch.float32, **host)
        ids = {g: i for i, g in enumerate(dict.fromkeys(s.group for s in samples))}
        gids = torch.tensor([ids[s.group] for s in samples], dtype=torch.long, **host)
        src_ids = {k: i for i, k in enumerate(dict.fromkeys(sample_source(s) for s in samples))}
        sources = torch.tensor([src_ids[sample_source(s)] for s in samples], dtype=torch.long, **host)
        dev = self.policy.device
        batch.completion_mask = batch.completion_mask.to(dev)
        caps = row_caps(self.loss_cfg, foreign, local)
        return _Rows(batch, beh.to(dev), seq_beh.to(dev), foreign.to(dev), rewards.to(dev), gids.to(dev),
                     caps.to(dev), local.to(dev), sources.to(dev), verified.to(dev), supervised.to(dev))

    def _grad_sq_norms(self, batch: TokenBatch, rows: int) -> torch.Tensor:
        """‖∇_θ log π(y_i)‖² per sample (exact OPOB): one backward per sample, costly by design;
        ``rows`` samples' graph is held at a time."""
        out = torch.zeros(len(batch), dtype=torch.float32, device=self.policy.device)
        for part in self._passes(batch, rows):
            logp = self.policy.completion_logprobs(_take(batch, part), self.temperature).sum(-1)  # (b,)
            for j in range(logp.shape[0]):
                grads = torch.autograd.grad(logp[j], self.params, retain_graph=j < logp.shape[0] - 1,
                                            allow_unused=True)
                for g in grads:  # summed on the device: no host sync per parameter
                    if g is not None:
                        out[part.rows[j]] += (g.float() ** 2).sum()
        return out

    def _logp_values(self, batch: TokenBatch, passes: list[Pass]) -> torch.Tensor:
        """log π_θ of every completion token, (B, T), no graph: a forward pass per pass."""
        out = torch.zeros(batch.completion_mask.shape, dtype=torch.float32, device=self.policy.device)
        with torch.no_grad():
            for part in passes:
                lp = self.policy.completion_logprobs(_take(batch, part), self.temperature)
                out[torch.as_tensor(part.rows, device=out.device), :lp.shape[1]] = lp.float()
        return out

    def _passes(self, batch: TokenBatch, rows: int) -> list[Pass]:
        """The passes over ``batch`` at ``rows`` rows and ``micro_batch_tokens`` tokens at most."""
        return plan_passes(*batch.lengths(), max_rows=rows, max_tokens=self.micro_batch_tokens)

    def _warmup(self) -> float:
        """Linear LR warm-up over the first updates. Adam's first steps move every parameter by
        about the full learning rate whatever the gradient's size; on a warm-started model that
        undoes part of the warm start before the moment estimates mean anything."""
        if self.warmup_steps <= 0:
            return 1.0
        return min(1.0, (self.version + 1) / self.warmup_steps)

    def _optimizer_step(self) -> None:
        """AdamW's step; its first one allocates the moments (2x the trained weights), which no
        micro-batch makes smaller: out of memory there is a clear error, not a retry."""
        try:
            self.optimizer.step()
        except Exception as e:  # noqa: BLE001 (only out-of-memory is translated)
            if not is_out_of_memory(e):
                raise
            msg = f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"
        else:
            return
        raise OutOfMemory(f"the optimizer's state does not fit in memory ({msg}); train a LoRA adapter "
                          f"(model.lora_rank) or use a smaller model")

    def _rows_per_pass(self, batch: TokenBatch) -> int:
        """The most rows a pass over ``batch`` takes now: the micro-batch, or fewer where the
        token budget cuts passes smaller (out-of-memory halving starts below that, not above)."""
        n = len(batch) if self.micro_batch_size <= 0 else min(self.micro_batch_size, len(batch))
        if self.micro_batch_tokens > 0:
            n = max(len(p.rows) for p in self._passes(batch, n))
        return n

    def _fit(self, attempt, batch: TokenBatch):
        """``attempt(rows)`` at this learner's passes over ``batch``, halved for good on out-of-memory."""
        def halved(old: int, new: int) -> None:
            self.micro_batch_size = new
            self.oom_halvings += 1

        out, _ = fit_by_halving(attempt, self._rows_per_pass(batch), what="the learner's step",
                                hint=_OOM_HINT, device=self.policy.device, on_halve=halved)
        return out

    def step(self, samples: list[TrainSample]) -> dict[str, float | None]:
        """Apply ``num_iterations`` updates from ``samples``; return the step's metrics.

        ``OutOfMemory`` (one row a pass does not fit) raised in iteration k > 1 leaves the first
        k - 1 updates applied; the node stops on it, so nothing is trained on half a step."""
        if not samples:
            raise ValueError("empty batch")
        whole = rows = self._batch(samples)
        # Rows of all-equal groups carry exactly no gradient: learn on the others only, divided by
        # the whole batch's denominator (policies/inert_rows.py). None: every row is learned on.
        live = live_rows(whole.rewards, whole.gids) if skippable(self.baseline, self.scale_rewards, self.loss_cfg) else None
        if live is not None and self.loss_cfg.peer_sft_coef > 0:
            # The term's rows carry gradient whatever their group's rewards (an all-right peer group is
            # what it learns from); those of inert groups are there for it alone (term_only).
            whole.term_only = whole.supervised & ~live
            live = live | whole.supervised
        if live is not None and bool(live.all()):
            live = None
        if live is not None:
            denominator, keep = whole_batch_denominator(whole.batch.completion_mask, whole.rewards, whole.gids,
                                                        self.baseline, self.scale_rewards, self.loss_cfg)
            idx = live.nonzero(as_tuple=True)[0]
            rows = self._batch([samples[i] for i in idx.tolist()]) if len(idx) else None
            if rows is not None:
                rows.denominator = denominator
                rows.term_only = None if whole.term_only is None else whole.term_only[idx]
                if rows.term_only is not None and bool(rows.term_only.all()):  # no GRPO row: an inert batch's
                    rows.diagnostics = inert_loss_metrics(whole.foreign, self.loss_cfg)
        batch = whole.batch
        halvings = self.oom_halvings
        # eval mode: μ was recorded in eval mode (no dropout), so π_θ must be too, or ratios
        # drift from 1 on-policy for any model with dropout. Gradients flow either way.
        self.policy.learning_mode()
        if self.baseline == "opob":  # never with inert rows left out (not skippable)
            rows.g2 = self._fit(lambda n: self._grad_sq_norms(batch, n), batch)
        metrics: dict[str, float | None] = {}
        first = None
        for it in range(self.num_iterations):
            # Gradients of this iteration, accumulated over micro-batches (all of the batch's in
            # one pass when it fits); an out-of-memory attempt is redone whole at half the rows.
            if rows is None:  # nothing in the batch carries gradient: no pass at all
                done = self._inert_pass(whole)
            else:
                done = self._fit(lambda n: self._gradients(rows, first, n), rows.batch)
            if first is None:
                first = done
                if rows is not None:  # naive sharing: μ := π_θ as this step begins, for every iteration
                    rows.beh, rows.seq_beh = done.beh, done.seq_beh
            for group in self.optimizer.param_groups:
                group["lr"] = self.base_lr * first.factor * self._warmup()
            grad_norm = torch.nn.utils.clip_grad_norm_(self.params, self.max_grad_norm)
            # Weights and version change together under the weights lock: a generator copying
            # them from another thread (node/run/overlap.py) reads one version, labelled exactly.
            with self.policy.weights_lock:
                if math.isfinite(float(grad_norm)):
                    self._optimizer_step()
                else:  # one bad batch must not poison the weights
                    log.warning("non-finite gradient norm at version %d: update skipped", self.version)
                self.version += 1
            if it == 0:
                metrics.update(first.metrics, loss=done.loss, grad_norm=float(grad_norm), **done.loss_metrics)
        adv, kept = first.adv.advantages, first.adv.loss_mask
        if live is not None:  # the whole batch's: the inert rows' advantages are 0
            adv = torch.zeros_like(whole.rewards).index_put_((idx,), adv) if rows is not None else adv
            kept = keep
        metrics.update(
            reward_mean=float(whole.rewards.mean()),
            adv_abs_mean=float(adv.abs().mean()),
            # trained samples whose advantage is 0 carry no gradient (a group whose rewards agree)
            zero_adv_frac=float((adv[kept].abs() <= ZERO_ADVANTAGE).float().mean()),
            inert_rows_skipped=float(len(samples) - (len(rows.batch) if rows is not None else 0)),
            completion_len=float(batch.completion_mask.sum(-1).mean()),
            batch_size=float(len(samples)),
            policy_version=float(self.version),
            micro_batch=float(self._rows_per_pass(rows.batch) if rows is not None else 0),
            passes=float(first.passes),
            oom_halvings=float(self.oom_halvings - halvings),
        )
        return metrics

    def _lr_factor(self, rho: float, ess: float) -> float:
        return lr_factor(rho, self.lr_rule, self.rho_ref, self.lr_floor, ess=ess, ess_ref=self.ess_ref,
                         cap=self.lr_cap)

    def _inert_pass(self, r: "_Rows") -> "_Pass":
        """A batch none of whose rows carries gradient: the gradient is exactly 0 with no pass
        (the optimizer still steps on it, as it would on the backward pass's zeros), and the
        ESS stats are those of no gradient row: ρ = 1, nothing to correct."""
        for p in self.params:
            p.grad = torch.zeros_like(p)
        adv = rewards_only_advantages(r.rewards, r.gids, self.baseline, self.scale_rewards)
        factor = self._lr_factor(1.0, 0.0)  # no gradient row: ρ = 1, no effective sample (count: the floor)
        stats = dict(behaviour_rho=1.0, ess=0.0, rho=1.0, lr_factor=factor, lr=self.base_lr * factor * self._warmup(),
                     grad_rows=0.0, grad_sources=0.0, rho_pooled=1.0, rho_all_rows=None)
        loss_metrics = inert_loss_metrics(r.foreign, self.loss_cfg)
        if self.loss_cfg.peer_sft_coef > 0:  # no row at all is marked supervised (they would be live)
            stats["peer_sft_lr_scale"] = 1.0
            loss_metrics.update(peer_sft_rows=0.0, peer_sft_nll=None)
        return _Pass(beh=r.beh, seq_beh=r.seq_beh, adv=adv, factor=factor, metrics=stats, loss=0.0,
                     loss_metrics=loss_metrics)

    def _gradients(self, r: "_Rows", first: "_Pass | None", rows: int) -> "_Pass":
        """One iteration's forward and backward, ``rows`` rows a pass; leaves the gradients in
        ``.grad`` and changes nothing else, so an attempt that runs out of memory can be redone.
        ``first`` is the step's first iteration (None: this is it), whose ESS, LR factor and
        advantages hold for the whole step."""
        batch = r.batch
        self.optimizer.zero_grad(set_to_none=True)
        passes = self._passes(batch, rows)
        whole = len(passes) == 1
        if whole:  # the pass with grad is also the pass whose values drive ESS and advantages
            logp_graph = self.policy.completion_logprobs(batch, self.temperature)  # (B, T)
            logp = logp_graph.detach()
        else:
            logp = self._logp_values(batch, passes)
        mask = batch.completion_mask
        beh, seq_beh = r.beh, r.seq_beh
        true_w = None
        if first is None and not self.off_policy_correction:
            # What the batch's ESS really is, for the record: naive sharing ignores it.
            true_w = sequence_weights(logp, mask, seq_beh, r.caps)
            # Pretend μ = π_θ as this step begins: every ratio and sequence weight starts at 1.
            beh = torch.where(mask > 0, logp, torch.zeros_like(logp))
            seq_beh = beh.sum(-1)
        # The loss's sequence weights follow π_θ through the iterations, as token ratios do.
        w = sequence_weights(logp, mask, seq_beh, r.caps)
        if first is None:
            # ESS, the LR factor and advantages come from the first pass: they describe how
            # far the behaviour policies are from π_θ as this step begins.
            adv = group_advantages(r.rewards, r.gids, self.baseline, self.scale_rewards,
                                   seq_weights=w, grad_sq_norms=r.g2)
            # Over the rows that carry gradient only (docs/algorithm.md, "ESS"): a pivot or
            # a zero-advantage row does not move the update, so it must not move the LR.
            carry = adv.loss_mask & (adv.advantages.abs() > ZERO_ADVANTAGE)
            # Per source, summed: one peer lowers ρ by at most its share of these rows.
            rho = ess_fraction_by_source(w, r.sources, carry)
            vcpo = self._lr_factor(rho, rho * float(carry.sum()))
            sft = lr_scale(self.loss_cfg.peer_sft_coef, int(r.supervised.sum()), self.loss_cfg.peer_sft_rows,
                           int(carry.sum())) if self.loss_cfg.peer_sft_coef > 0 else None
            factor = vcpo if sft is None else vcpo * sft  # the LR's (the term alone: its share of a step)
            w_beh = w if true_w is None else true_w
            stats = dict(behaviour_rho=rho if true_w is None else ess_fraction_by_source(w_beh, r.sources, carry),
                         ess=rho * int(carry.sum()), rho=rho, lr_factor=vcpo,
                         lr=self.base_lr * factor * self._warmup(), grad_rows=float(carry.sum()),
                         grad_sources=float(r.sources[carry].unique().numel()),
                         # Diagnostics only (they do not drive the LR): the whole-batch ESS
                         # of the gradient rows, every source's weights pooled (the rule
                         # before per-source ESS), and over every row, signal or not.
                         rho_pooled=ess_fraction(w_beh, carry),
                         rho_all_rows=ess_fraction(w_beh))
            if sft is not None:
                stats["peer_sft_lr_scale"] = sft
        else:
            adv, factor, stats = first.adv, first.factor, first.metrics
        inputs = LossInputs(logp=logp, behaviour_logp=beh, behaviour_seq_logp=seq_beh, mask=mask,
                            advantages=adv.advantages, sample_mask=adv.loss_mask, sequence_level=r.foreign,
                            seq_weights=w, external=~r.local, verified=r.verified, supervised=r.supervised,
                            term_only=r.term_only)
        plan = loss_plan(inputs, self.loss_cfg)
        if r.denominator is not None:  # inert rows left out: the whole batch's (policies/inert_rows.py)
            plan = dataclasses.replace(plan, denominator=r.denominator)
        if r.diagnostics is not None:
            plan = dataclasses.replace(plan, metrics={**plan.metrics, **r.diagnostics})
        if whole:
            out = policy_loss(dataclasses.replace(inputs, logp=logp_graph), self.loss_cfg, plan)
            out.loss.backward()
            loss = float(out.loss.detach())
        else:
            loss = 0.0
            for p in passes:
                lp = self.policy.completion_logprobs(_take(batch, p), self.temperature)
                idx, cols = torch.as_tensor(p.rows, device="cpu"), lp.shape[1]
                part = policy_loss(dataclasses.replace(inputs.rows(idx, cols), logp=lp), self.loss_cfg,
                                   plan.rows(idx, cols))
                part.loss.backward()  # micro-batch losses sum to the batch's: so do their gradients
                loss += float(part.loss.detach())
        return _Pass(beh=beh, seq_beh=seq_beh, adv=adv, factor=factor, metrics=stats, loss=loss,
                     loss_metrics=plan.metrics, passes=len(passes))


@dataclass
class _Rows:
    """A step's batch on the device (``Learner._batch``); ``beh``/``seq_beh`` are replaced by
    π_θ's when off-policy correction is off."""

    batch: TokenBatch
    beh: torch.Tensor
    seq_beh: torch.Tensor
    foreign: torch.Tensor
    rewards: torch.Tensor
    gids: torch.Tensor
    caps: torch.Tensor
    local: torch.Tensor
    sources: torch.Tensor
    verified: torch.Tensor  # (B,) bool: TrainSample.verified
    supervised: torch.Tensor  # (B,) bool: TrainSample.supervised
    g2: torch.Tensor | None = None  # per-row squared gradient norms (the opob baseline only)
    denominator: torch.Tensor | None = None  # the loss's, when these rows are a batch's live rows
    term_only: torch.Tensor | None = None  # (B,) bool: rows here for the supervised term alone
    diagnostics: dict | None = None  # the GRPO diagnostics, when these rows hold no GRPO row


@dataclass(frozen=True)
class _Pass:
    """What one iteration's forward/backward found (the first one's holds for the whole step)."""

    beh: torch.Tensor
    seq_beh: torch.Tensor
    adv: Advantages
    factor: float
    metrics: dict
    loss: float
    loss_metrics: dict
    passes: int = 0  # forward/backward passes the gradient took (0: none, an inert batch)


def _take(batch: TokenBatch, part: Pass) -> TokenBatch:
    return batch.take(part.rows, part.prompt_len, part.completion_len)
