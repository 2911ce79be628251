"""A round's rollouts: which tasks to sample, generating and scoring completions, and turning
scored rollouts into learner samples.

Task ids for a round come from ``(seed, step)`` alone, so a resumed run asks the same questions
and any node can regenerate a task's question and ground truth from its id. Rewards are always
computed here, by the node that will train on the rollout.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Sequence

from swarm_node.node.swarm.admission import allowed_specials
from swarm_node.node.swarm.pool import AdmittedGroup
from swarm_node.policies.learner import TrainSample
from swarm_node.protocol.messages import RolloutRecord, same_tokenizer
from swarm_node.policies.policy import Completion, Policy, SamplingParams
from swarm_node.rewards.registry import make_task, sample_task_ids
from swarm_node.rewards.reserved import HeldOutSet
from swarm_node.rewards.scoring import Reward, RewardConfig, score
from swarm_node.protocol.task_id import TaskId

__all__ = ["Rollout", "round_task_ids", "generate_rollouts", "to_train_samples", "to_records",
           "external_samples"]


@dataclass(frozen=True)
class Rollout:
    task_id: TaskId
    completion: Completion
    policy_version: int  # version of the policy that sampled it
    reward: Reward  # scored locally from the regenerated ground truth


def round_task_ids(seed: int | str, step: int, n: int, families: Sequence[str],
                   difficulties: Sequence[int], held_out: HeldOutSet | None = None) -> list[TaskId]:
    """The ``n`` tasks of round ``step``: a pure function of its arguments (string seeds are
    hashed with sha512 by ``random``, so this is stable across processes and Python versions).

    Families are stratified, not drawn independently: slot i of round s takes family
    ``families[(s*n + i) % len(families)]``, so every round covers the families evenly and, over
    rounds, each gets its share exactly (a family listed twice gets twice the share). The families
    differ a lot in difficulty; independent draws made a round's mean reward swing with its family
    mix, which is noise in both the gradient and the reward curve. Seeds and levels stay random.
    A task asking one of ``held_out``'s questions (rewards/reserved.py) is drawn again.
    """
    rng = random.Random(f"swarm-node:{seed}:{step}")
    k = len(families)
    exclude = held_out.holds_id if held_out is not None else None
    return [sample_task_ids(rng, 1, [families[(step * n + i) % k]], difficulties, exclude)[0] for i in range(n)]


def generate_rollouts(policy: Policy, task_ids: list[TaskId], num_generations: int,
                      params: SamplingParams, policy_version: int,
                      reward_cfg: RewardConfig) -> list[Rollout]:
    tasks = [make_task(t) for t in task_ids]
    groups = policy.generate([policy.prompt_of(t) for t in tasks], num_generations, params)
    return [Rollout(task.id, c, policy_version, score(task, c.text, reward_cfg))
            for task, group in zip(tasks, groups) for c in group]


def to_train_samples(rollouts: list[Rollout], local: bool = True) -> list[TrainSample]:
    """Samples for the learner; the group of a completion is its task id."""
    return [TrainSample(group=str(r.task_id), prompt_ids=r.completion.prompt_ids,
                        completion_ids=r.completion.completion_ids,
                        behaviour_logprobs=r.completion.logprobs,
                        behaviour_seq_logprob=r.completion.seq_logprob,
                        reward=r.reward.total, policy_version=r.policy_version, local=local)
            for r in rollouts]


def to_records(rollouts: list[Rollout], special_ids: frozenset[int] = frozenset(),
               eos_id: int | None = None) -> list[RolloutRecord]:
    """Wire records of this node's rollouts (no reward: receivers score for themselves).

    A completion that sampled a special token before its end (say ``<pad>``) is kept for this
    node's own training but not published: peers refuse such batches (``special_tokens``), and
    one such completion must not cost the whole round's batch."""
    return [RolloutRecord(task_id=str(r.task_id), completion_ids=r.completion.completion_ids,
                          completion_text=r.completion.text, behaviour_logprobs=r.completion.logprobs,
                          truncated=r.completion.truncated)
            for r in rollouts if allowed_specials(r.completion.completion_ids, special_ids, eos_id)]


def external_samples(groups: list[AdmittedGroup], policy: Policy, reward_cfg: RewardConfig,
                     group_cap: int, max_tokens: int) -> tuple[list[TrainSample], list[float], int]:
    """Learner samples from peers' admitted groups, scored here against the task admission
    regenerated from the id.

    Admission (node/swarm/admission.py) decided the rest once: the task, the group's records (cut
    to the exchange's group cap) and whether the peer's tokenizer is this node's (``token_level``).
    Two cheap guards stay here, because an exchange is built apart from the learner and may be
    built with other settings (a script's exchange with the default cap of 64): at most
    ``group_cap`` completions per group (the learner's own group size), and token ids only when
    the recorded verdict also holds against this policy's fingerprint. Same tokenizer: the peer's token
    ids and per-token behaviour log-probs are used as sent (admission checked the text is their
    decoding). Another tokenizer: the text is re-tokenized for this policy and only the sequence
    log-prob Σ log μ transfers, so the learner applies the sequence-level ratio. Completions longer
    than ``max_tokens`` in this node's tokens (its own ``max_completion_length``) are left out: a
    peer's longer limit, or a hostile one, must not grow the learner's batch beyond what this node
    budgets for. A group whose prompt leaves no room in the model's positions for such a completion
    is left out too (a task source's questions have no length bound, and a peer may pick the
    longest ids it can find). Returns the samples, their correctness (for metrics) and how many
    completions were left out for length.
    """
    samples, correct, too_long = [], [], 0
    positions = getattr(policy.model.config, "max_position_embeddings", None)
    for g in groups:
        prompt_ids = policy.encode_prompts([policy.prompt_of(g.task)])[0]
        if isinstance(positions, int) and len(prompt_ids) + max_tokens > positions:
            too_long += len(g.records[:group_cap])
            continue
        token_level = g.token_level and same_tokenizer(g.tokenizer_fingerprint, policy.rollout_fingerprint)
        for rec in g.records[:group_cap]:
            if token_level:
                ids, lps = rec.completion_ids, rec.behaviour_logprobs
            else:
                ids, lps = policy.encode_completion(rec.completion_text), None
                if rec.truncated:  # it never ended: no EOS to learn
                    ids = ids[:-1] or ids
            # Counted here, not only at admission: a foreign text's length in this node's tokens
            # is known only once re-tokenized (admission, without this node's encoder, bounds its
            # bytes), and an exchange built without max_tokens left its own tokens uncapped.
            if len(ids) > max_tokens:
                too_long += 1
                continue
            reward = score(g.task, rec.completion_text, reward_cfg)
            correct.append(reward.correctness)
            samples.append(TrainSample(group=g.key, prompt_ids=prompt_ids, completion_ids=ids,
                                       behaviour_logprobs=lps,
                                       behaviour_seq_logprob=float(sum(rec.behaviour_logprobs)),
                                       reward=reward.total, policy_version=g.policy_version,
                                       local=False, source=g.sender,
                                       verified=reward.verified))
    return samples, correct, too_long
