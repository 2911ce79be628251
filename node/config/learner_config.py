"""The ``[learner]`` section of a node's configuration: the optimizer, the loss and its trust region,
the off-policy correction and its learning-rate rule.

Its flags are ``--learner.learning_rate`` and so on, like every section's (node/config/config.py).
node/run/wiring.py hands each field to the ``Learner`` or ``LossConfig`` parameter of the same name
(policies/learner.py, policies/loss.py); what they do is docs/algorithm.md's.
"""

from __future__ import annotations

from typing import Any, Literal, Optional

from pydantic import Field, NonNegativeFloat, PositiveFloat, field_validator

from swarm_node.node.config.config_section import Section, none_words

__all__ = ["LearnerConfig"]


class LearnerConfig(Section):
    learning_rate: float = Field(1e-4, gt=0, description="AdamW base learning rate before ESS scaling and warm-up")
    weight_decay: float = Field(0.0, ge=0, description="AdamW weight decay")
    max_grad_norm: float = Field(1.0, gt=0, description="gradient clipping norm")
    warmup_steps: int = Field(20, ge=0, description="linear learning-rate warm-up over the first updates (0 = off)")
    num_iterations: int = Field(1, ge=1, description="optimisation passes per generated batch (mu)")
    micro_batch_size: int = Field(0, ge=0, description="completions per forward/backward pass, gradients accumulated to the whole batch's exactly (0 = the whole batch in one pass); halved for good, and recorded, when a pass runs out of memory")
    micro_batch_tokens: int = Field(0, ge=0, description="padded tokens per forward/backward pass at most (rows x their longest prompt + completion; 0 = no bound): rows are taken longest first, so each pass holds rows of about one length at its own width; bounds the learner's memory by tokens, where micro_batch_size bounds rows")
    baseline: Literal["mean", "median", "opob", "opob_approx"] = Field("mean", description="mean (GRPO), median (MC-GRPO, G+1 samples, pivot excluded), opob (VCPO optimal baseline, exact per-sample gradient norms), opob_approx (drops the gradient-norm factor)")
    scale_rewards: Literal["group", "batch", "none"] = Field("none", description="divide advantages by the group or batch reward std")
    loss_type: Literal["grpo", "dapo", "dr_grpo"] = Field("dapo", description="token aggregation of the loss")
    importance_sampling_level: Literal["token", "sequence"] = Field("token", description="token ratios with a trust region, or truncated sequence weights (VCPO)")
    epsilon: float = Field(0.2, ge=0, description="lower PPO clip")
    epsilon_high: Optional[PositiveFloat] = Field(0.28, description="upper PPO clip (DAPO); none = epsilon")
    delta: Optional[PositiveFloat] = Field(4.0, description="clamp on the unclipped ratio before PPO clipping (INTELLECT-2 uses 4): bounds the loss of a negative-advantage token whose ratio explodes; none = off")
    m2po_tau: Optional[NonNegativeFloat] = Field(None, description="M2PO second-moment bound; replaces PPO clipping; none = off")
    weight_cap: float = Field(8.0, gt=0, description="truncation c of sequence importance weights (VCPO: 8)")
    lr_rule: Literal["sqrt", "linear", "none", "count"] = Field("sqrt", description="ESS learning-rate rule: sqrt, linear (VCPO: the factor is at most 1), none, or count: sqrt(ESS / learner.ess_ref) capped at learner.lr_cap, so a step with more effective samples (peers' informative groups) may go further (docs/algorithm.md)")
    ess_ref: float = Field(0.0, ge=0, allow_inf_nan=False, description="count rule: the effective gradient rows at which the LR is unscaled (0 = the rows a step of this node's own groups carries: (generation.prompts_per_step - swarm.external_groups when sharing) x generation.num_generations; only rows with a nonzero advantage count toward ESS, so an on-policy step whose groups are partly all-equal, or any step under the median baseline, has a factor below 1)")
    lr_cap: float = Field(2.0, ge=1, le=4, description="count rule: the largest LR factor, whatever peers send")
    rho_ref: float = Field(1.0, gt=0, le=1, description="ESS fraction at which the LR is unscaled")
    lr_floor: float = Field(0.0, ge=0, le=1, description="lowest LR factor the ESS rule may give")
    max_off_policy_steps: int = Field(32, ge=0, description="drop rollouts from policies more than this many versions old")
    off_policy_correction: bool = Field(True, description="false = treat every rollout as sampled by the current policy (naive sharing, as rl-swarm does): no importance ratios, ESS = B; for comparison experiments only")
    external_success_floor: Optional[float] = Field(None, gt=0, le=1, description="f in (0, 1]: a peer's completion that this node scored right (advantage > 0) weighs at least f in the loss (its token ratio or sequence weight is max(weight, f), never above the clip or cap), so a correct answer this node would rarely sample still teaches; none = off (docs/algorithm.md, section 10)")

    peer_sft_coef: float = Field(0.0, ge=0, allow_inf_nan=False, description="weight of a supervised term (rejection-sampling fine-tuning) on peers' completions this node verified (right, and exactly the task's canonical answer block in this node's own tokens) for kinds of question (family, level) it got all wrong in the last steps that drew them: coef / peer_sft_rows times each such row's mean token negative log-likelihood, at most peer_sft_rows rows a step and ceil(peer_sft_rows x swarm.max_sender_share) from one sender; a step whose only gradient is the term runs at min(1, coef) x rows / peer_sft_rows of the learning rate; 0 = off (docs/algorithm.md, section 11)")
    peer_sft_rows: int = Field(8, ge=1, le=256, description="R: the most peer rows the supervised term (peer_sft_coef) takes a step, and its constant divisor, so each row weighs coef / R however many others there are")

    @field_validator("epsilon_high", "delta", "m2po_tau", "external_success_floor", mode="before")
    @classmethod
    def _nullable(cls, v: Any) -> Any:
        return none_words(v)
