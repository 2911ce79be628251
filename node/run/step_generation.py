"""One step's local rollouts: which tasks, which weights sample them, the version they are
labelled with, and what the step's generation cost.

The sampler is the live policy, unless one of these samples instead: the vLLM engine (it holds
the learner's weights, synced after each update), a copy some updates old (``train.behaviour_lag``,
node/run/behaviour_lag.py) or the overlap's copy (``train.max_async``, node/run/overlap.py). With
``generation.over_provision`` the step's generation goes through the partial-rollout buffer
(node/run/april.py). The version label and the weights are read under one lock, so the label is
exact: a follower applying a broadcast version, or the learner updating, waits for it.
"""

from __future__ import annotations

import contextlib
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import torch

from swarm_node.node.run.april import PartialRollouts
from swarm_node.node.run.overlap import GeneratorCopy
from swarm_node.node.run.rollouts import Rollout, generate_rollouts, round_task_ids

if TYPE_CHECKING:
    from swarm_node.node.run.role_context import RoleContext
    from swarm_node.node.run.behaviour_lag import LaggedBehaviour
    from swarm_node.node.config.config import NodeConfig
    from swarm_node.policies.learner import Learner
    from swarm_node.policies.policy import Policy, SamplingParams
    from swarm_node.rewards.reserved import HeldOutSet
    from swarm_node.rewards.scoring import RewardConfig

__all__ = ["StepRollouts", "StepGenerator", "carry_bound"]


@dataclass
class StepRollouts:
    rollouts: list[Rollout]
    version: int  # the batch's label: its oldest rollout's version
    seconds: float  # the generation's own time
    metrics: dict = field(default_factory=dict)


def carry_bound(cfg: "NodeConfig") -> int:
    """How many versions a carried APRIL row may fall behind before it is restarted: the bound its
    rollouts must meet where they are trained. A worker's go to its learner, which drops groups
    made more than ``broadcast.max_staleness`` of its updates ago (a worker's version numbers are the
    learner's published ones: one update each at ``publish_every 1``; a learner publishing less often
    moves further per version, so there this cap is looser than its bound). A node that learns
    drops rollouts more than ``learner.max_off_policy_steps`` old at training time, which comes up
    to ``train.max_async`` versions after generation."""
    if cfg.broadcast.role == "worker":
        return cfg.broadcast.max_staleness
    return max(cfg.learner.max_off_policy_steps - cfg.train.max_async, 0)


class StepGenerator:
    """Generates a step's rollouts (called in a worker thread)."""

    def __init__(self, cfg: "NodeConfig", policy: "Policy", learner: "Learner", lagged: "LaggedBehaviour",
                 vllm, role, role_ctx: "RoleContext", held_out: "HeldOutSet | None",
                 reward_cfg: "RewardConfig", sampling: "SamplingParams"):
        self.cfg, self.policy, self.learner, self.lagged, self.vllm = cfg, policy, learner, lagged, vllm
        self.role, self.role_ctx, self.held_out = role, role_ctx, held_out
        self.reward_cfg, self.sampling = reward_cfg, sampling
        gen = cfg.generation
        self.copy = (GeneratorCopy(policy, gen.device or cfg.model.device) if cfg.train.max_async > 0 else None)
        self.april = (PartialRollouts(gen.over_provision, cfg.group_size, gen.max_completion_length,
                                      max_age=carry_bound(cfg)) if gen.over_provision > 0 else None)

    @property
    def sampler_policy(self) -> "Policy":
        """The policy instance that samples (its batch size and out-of-memory halvings)."""
        if self.copy is not None:
            return self.copy.policy
        return self.lagged.behaviour or self.policy

    def _version_now(self) -> int:
        role_version = self.role.rollout_version(self.role_ctx)
        return role_version if role_version is not None else self.learner.version

    def __call__(self, step: int, n_groups: int, task_seed: int | str) -> StepRollouts:
        cfg = self.cfg
        t0 = time.perf_counter()
        if self.policy.device.type == "cuda" and self.copy is None:  # this step's peak, generation and learner together
            torch.cuda.reset_peak_memory_stats(self.policy.device)
        n_new = self.april.new_prompts(n_groups) if self.april is not None else n_groups
        task_ids = round_task_ids(task_seed, step, n_new, cfg.tasks.names, cfg.tasks.difficulties, self.held_out)
        metrics: dict = {}
        behaviour_version = -1
        if self.copy is not None:
            sampler = self.copy.policy
            lock = sampler.weights_lock  # the copy's own: the learner goes on meanwhile
        else:
            sampler, behaviour_version = self.lagged.sampler()
            if self.vllm is not None:  # it holds learner.version's weights (synced after each update)
                sampler = self.vllm
            lock = self.policy.weights_lock
        before = sampler.generation_oom_halvings
        with lock, (self.copy.sampling() if self.copy is not None else contextlib.nullcontext()):
            if self.copy is not None:
                version = self.copy.sync(self.policy, self._version_now)
            else:
                role_version = self.role.rollout_version(self.role_ctx)
                version = (role_version if role_version is not None
                           else self.learner.version if behaviour_version < 0 else behaviour_version)
            if self.april is not None:
                rollouts, metrics = self.april.generate(sampler, task_ids, n_groups, self.sampling, version,
                                                        self.reward_cfg, step)
            else:
                rollouts = generate_rollouts(sampler, task_ids, cfg.group_size, self.sampling, version,
                                             self.reward_cfg)
        label = min((r.policy_version for r in rollouts), default=version)
        metrics.update(gen_oom_halvings=sampler.generation_oom_halvings - before,
                       gen_batch=self.sampler_policy.generation_batch_size or len(rollouts))
        return StepRollouts(rollouts, label, time.perf_counter() - t0, metrics)
