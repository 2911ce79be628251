"""The learner: one off-policy-corrected GRPO update of a ``Policy`` from a batch of samples.

It owns the optimizer and the policy version counter. Per step:

1. one forward pass with grad gives log π_θ of every completion token;
2. from its detached values: truncated sequence weights w̄, ESS, ρ = ESS/B (summed per behaviour
   source: this node, each peer) and the VCPO learning rate factor (``policies.offpolicy``);
   group advantages with the chosen baseline (``policies.advantages``), which may use w̄ (and,
   for exact OPOB, per-sample gradient norms);
3. the policy loss with its trust region (``policies.loss``), backward, clip, AdamW step at
   ``learning_rate · lr_factor``.

Corrections reuse the one forward pass, so a corrected step costs about what a plain GRPO step
costs (scripts/bench_learner.py measures it). Exact OPOB is the exception: it needs one extra
backward per sample and says so in its name.
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass

import torch

from policies.advantages import group_advantages
from policies.loss import LossConfig, LossInputs, policy_loss, row_caps, sequence_weights
from policies.offpolicy import ess_fraction, ess_fraction_by_source, lr_factor
from policies.policy import Policy, TokenBatch

log = logging.getLogger(__name__)

__all__ = ["TrainSample", "Learner", "LOCAL_SOURCE", "sample_source"]

_ZERO_ADV = 1e-9  # |advantage| at or below this carries no gradient (a group whose rewards agree)


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

    @property
    def foreign_tokens(self) -> bool:
        return self.behaviour_logprobs is None


LOCAL_SOURCE = ""  # peer ids are never empty, so this node's own rows cannot collide with a peer's


def sample_source(s: TrainSample) -> str:
    """The behaviour source a sample's ESS is computed in: this node's rows form one source, each
    peer is another (a different behaviour policy). For a peer's row without ``source``, the
    sender is read from its group, which node/rollouts.py builds as ``PeerGroup.key`` =
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
                 lr_floor: float = 0.0, warmup_steps: int = 0, temperature: float = 1.0,
                 loss: LossConfig = LossConfig(), off_policy_correction: bool = True):
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
        self.warmup_steps = warmup_steps
        self.temperature = temperature
        self.loss_cfg = loss
        # False: every sample is treated as drawn from the current policy (naive sharing, as
        # rl-swarm does): no importance ratios against μ, ESS = B. For comparisons only.
        self.off_policy_correction = off_policy_correction
        self.version = 0  # number of optimizer updates applied to the policy

    def _batch(self, samples: list[TrainSample]):
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
        rewards = torch.tensor([s.reward for s in samples], dtype=torch.float32, **host)
        ids = {g: i for i, g in enumerate(dict.fromkeys(s.group for s in samples))}
        gids = torch.tensor([ids[s.group] for s in samples], dtype=torch.long, **host)
        src_ids = {k: i for i, k in enumerate(dict.fromkeys(sample_source(s) for s in samples))}
        sources = torch.tensor([src_ids[sample_source(s)] for s in samples], dtype=torch.long, **host)
        dev = self.policy.device
        batch.completion_mask = batch.completion_mask.to(dev)
        caps = row_caps(self.loss_cfg, foreign, local)
        return (batch, beh.to(dev), seq_beh.to(dev), foreign.to(dev), rewards.to(dev), gids.to(dev),
                caps.to(dev), local.to(dev), sources.to(dev))

    def _grad_sq_norms(self, batch: TokenBatch) -> torch.Tensor:
        """‖∇_θ log π(y_i)‖² per sample (exact OPOB): one backward per sample, costly by design."""
        logp = self.policy.completion_logprobs(batch, self.temperature).sum(-1)  # (B,)
        out = torch.zeros(logp.shape[0], dtype=torch.float32, device=logp.device)
        for i in range(logp.shape[0]):
            grads = torch.autograd.grad(logp[i], self.params, retain_graph=i < logp.shape[0] - 1,
                                        allow_unused=True)
            for g in grads:  # summed on the device: no host sync per parameter
                if g is not None:
                    out[i] += (g.float() ** 2).sum()
        return out

    def _warmup(self) -> float:
        """Linear LR warm-up over the first updates. Adam's first steps move every parameter by
        about the full learning rate whatever the gradient's size; on a warm-started model that
        undoes part of the warm start before the moment estimates mean anything."""
        if self.warmup_steps <= 0:
            return 1.0
        return min(1.0, (self.version + 1) / self.warmup_steps)

    def step(self, samples: list[TrainSample]) -> dict[str, float]:
        """Apply ``num_iterations`` updates from ``samples``; return the step's metrics."""
        if not samples:
            raise ValueError("empty batch")
        batch, beh, seq_beh, foreign, rewards, gids, caps, local, sources = self._batch(samples)
        # eval mode: μ was recorded in eval mode (no dropout), so π_θ must be too, or ratios
        # drift from 1 on-policy for any model with dropout. Gradients flow either way.
        self.policy.model.eval()
        g2 = self._grad_sq_norms(batch) if self.baseline == "opob" else None
        metrics: dict[str, float] = {}
        adv = None
        factor = 1.0
        for it in range(self.num_iterations):
            logp = self.policy.completion_logprobs(batch, self.temperature)  # (B, T)
            true_w = None
            if it == 0 and not self.off_policy_correction:
                # What the batch's ESS really is, for the record: naive sharing ignores it.
                true_w = sequence_weights(logp.detach(), batch.completion_mask, seq_beh, caps)
                # Pretend μ = π_θ as this step begins: every ratio and sequence weight starts at 1.
                beh = torch.where(batch.completion_mask > 0, logp.detach(), torch.zeros_like(logp))
                seq_beh = beh.sum(-1)
            # The loss's sequence weights follow π_θ through the iterations, as token ratios do.
            w = sequence_weights(logp, batch.completion_mask, seq_beh, caps)
            if adv is None:
                # ESS, the LR factor and advantages come from the first pass: they describe how
                # far the behaviour policies are from π_θ as this step begins.
                adv = group_advantages(rewards, gids, self.baseline, self.scale_rewards,
                                       seq_weights=w, grad_sq_norms=g2)
                # Over the rows that carry gradient only (docs/algorithm.md, "ESS"): a pivot or
                # a zero-advantage row does not move the update, so it must not move the LR.
                carry = adv.loss_mask & (adv.advantages.abs() > _ZERO_ADV)
                # Per source, summed: one peer lowers ρ by at most its share of these rows.
                rho = ess_fraction_by_source(w, sources, carry)
                factor = lr_factor(rho, self.lr_rule, self.rho_ref, self.lr_floor)
                w_beh = w if true_w is None else true_w
                metrics["behaviour_rho"] = rho if true_w is None else ess_fraction_by_source(w_beh, sources, carry)
                metrics.update(ess=rho * int(carry.sum()), rho=rho, lr_factor=factor,
                               lr=self.base_lr * factor * self._warmup(), grad_rows=float(carry.sum()),
                               grad_sources=float(sources[carry].unique().numel()),
                               # Diagnostics only (they do not drive the LR): the whole-batch ESS
                               # of the gradient rows, every source's weights pooled (the rule
                               # before per-source ESS), and over every row, signal or not.
                               rho_pooled=ess_fraction(w_beh, carry),
                               rho_all_rows=ess_fraction(w_beh))
            out = policy_loss(LossInputs(logp=logp, behaviour_logp=beh, behaviour_seq_logp=seq_beh,
                                         mask=batch.completion_mask, advantages=adv.advantages,
                                         sample_mask=adv.loss_mask, sequence_level=foreign,
                                         seq_weights=w, external=~local),
                              self.loss_cfg)
            lr = self.base_lr * factor * self._warmup()
            for group in self.optimizer.param_groups:
                group["lr"] = lr
            self.optimizer.zero_grad(set_to_none=True)
            out.loss.backward()
            grad_norm = torch.nn.utils.clip_grad_norm_(self.params, self.max_grad_norm)
            if math.isfinite(float(grad_norm)):
                self.optimizer.step()
            else:  # one bad batch must not poison the weights
                log.warning("non-finite gradient norm at version %d: update skipped", self.version)
            self.version += 1
            if it == 0:
                metrics.update(loss=float(out.loss.detach()), grad_norm=float(grad_norm), **out.metrics)
        metrics.update(
            reward_mean=float(rewards.mean()),
            adv_abs_mean=float(adv.advantages.abs().mean()),
            # trained samples whose advantage is 0 carry no gradient (a group whose rewards agree)
            zero_adv_frac=float((adv.advantages[adv.loss_mask].abs() <= _ZERO_ADV).float().mean()),
            completion_len=float(batch.completion_mask.sum(-1).mean()),
            batch_size=float(len(samples)),
            policy_version=float(self.version),
        )
        return metrics
