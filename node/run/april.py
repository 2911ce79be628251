"""APRIL partial rollouts, node side (``generation.over_provision`` > 0): a step starts more
prompt groups than it needs, stops generating once enough have finished, and carries the
unfinished ones into the next step, where they are continued first.

Why: a step's generation lasts as long as its longest completion, and reasoning traces are
long-tailed, so most of the batch sits idle waiting for a few rows. Stopping at the target and
continuing the stragglers later keeps every row busy; nothing is thrown away.

What a rollout carries, under this: a completion continued across steps has tokens sampled by two
(or more) policy versions. Each token keeps the behaviour log-prob of the weights that sampled it,
which is exactly the μ(y_t | x, y_<t) the learner's per-token ratio needs; its ``policy_version``
is its *oldest* token's, so the staleness bound (``learner.max_off_policy_steps``) applies to the
oldest part of it, and a batch published to peers is labelled with its oldest rollout's version.
Only finished groups leave this buffer: they are trained on and published, never a partial one.

How long a row is carried is bounded too (``max_age``): a row whose oldest token is more than
``max_age`` versions behind the weights generating now is restarted from its prompt (its tokens
dropped, counted ``april_restarted_rows``). The learner would drop it anyway (its staleness bound),
and worse, the batch published to peers carries its oldest rollout's label, so one straggler
would make a worker's learner drop every group of that batch. The node sets ``max_age`` to the
bound its data must meet (node/run/step_generation.py).

Bounds: a step returns exactly ``need`` finished groups (the learner's batch, and its memory, stay
what the configuration says; groups that finished beyond that wait for the next step, oldest
first), and it starts new prompts only up to ``ceil(need × (1 + over_provision))`` groups in
play, so the buffer never holds more than that. A stop drops what is carried (counted in the log).
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass, field

from swarm_node.node.run.rollouts import Rollout
from swarm_node.policies.partial_generation import BUDGET, HALTED, RowRequest, generate_partial
from swarm_node.policies.policy import Completion, Policy, SamplingParams
from swarm_node.protocol.task_id import TaskId
from swarm_node.rewards.registry import make_task
from swarm_node.rewards.scoring import RewardConfig, score

log = logging.getLogger(__name__)

__all__ = ["PartialRollouts"]


@dataclass
class _Row:
    ids: tuple[int, ...] = ()
    logprobs: tuple[float, ...] = ()
    oldest: int | None = None  # the version that sampled its first token
    newest: int | None = None
    ended: str | None = None  # EOS or BUDGET once finished


@dataclass
class _Group:
    task_id: TaskId
    prompt_ids: tuple[int, ...]
    rows: list[_Row] = field(default_factory=list)
    drawn_at: int = 0  # the step that started it

    @property
    def finished(self) -> bool:
        return all(r.ended is not None for r in self.rows)


class PartialRollouts:
    """The groups in play between steps, and one step's generation over them."""

    def __init__(self, over_provision: float, group_size: int, max_tokens: int, max_age: int | None = None):
        if over_provision <= 0:
            raise ValueError("over_provision must be > 0 (0 is the loop without partial rollouts)")
        if max_age is not None and max_age < 0:
            raise ValueError("max_age must be >= 0 versions")
        self.over_provision = over_provision
        self.max_age = max_age  # versions a row's oldest token may be behind the generating weights
        self.group_size = group_size
        self.max_tokens = max_tokens
        self.groups: list[_Group] = []  # carried: unfinished, or finished beyond a step's need

    def in_play(self, need: int) -> int:
        """Groups a step keeps in play: need × (1 + over_provision), rounded up."""
        return math.ceil(need * (1 + self.over_provision))

    def new_prompts(self, need: int) -> int:
        """Prompts to start this step: up to ``in_play(need)`` groups with those carried."""
        return max(0, self.in_play(need) - len(self.groups))

    @property
    def carried_rows(self) -> int:
        return sum(1 for g in self.groups for r in g.rows if r.ended is None)

    def generate(self, policy: Policy, task_ids: list[TaskId], need: int, params: SamplingParams,
                 version: int, reward_cfg: RewardConfig, step: int) -> tuple[list[Rollout], dict]:
        """This step: continue the carried groups' unfinished rows first, start ``task_ids``
        (``new_prompts(need)`` of them), stop once ``need`` groups are finished; returns their
        scored rollouts (exactly ``need`` groups, the oldest first) and the step's counts."""
        carried_before = len(self.groups)
        for t in task_ids:
            prompt = policy.encode_prompts([policy.prompt_of(make_task(t))])[0]
            self.groups.append(_Group(t, prompt, [_Row() for _ in range(self.group_size)], drawn_at=step))
        restarted = self._restart_stale(version)
        ready = sum(g.finished for g in self.groups)  # finished beyond an earlier step's need
        requests, where = [], []
        for gi, g in enumerate(self.groups):
            for ri, row in enumerate(g.rows):
                if row.ended is None:
                    requests.append(RowRequest(g.prompt_ids + row.ids, self.max_tokens - len(row.ids), gi))
                    where.append((g, row))
        halted = False
        if requests and ready < need:
            results, halted = generate_partial(policy, requests, params, need - ready)
            for (g, row), res in zip(where, results):
                if res.ids:
                    row.ids += res.ids
                    row.logprobs += res.logprobs
                    row.oldest = version if row.oldest is None else row.oldest
                    row.newest = version
                if res.ended != HALTED:
                    row.ended = res.ended
        done = [g for g in self.groups if g.finished][:need]
        self.groups = [g for g in self.groups if not any(g is d for d in done)]
        rollouts = [self._rollout(policy, g, row, reward_cfg) for g in done for row in g.rows]
        stats = {
            "april_started": len(task_ids),
            "april_continued": carried_before,
            "april_finished": len(done),
            "april_carried": len(self.groups),
            "april_carried_rows": self.carried_rows,
            "april_halted": int(halted),
            "april_restarted_rows": restarted,
            "april_mixed_versions": sum(r.policy_version != r_newest for r, r_newest in
                                        zip(rollouts, [row.newest for g in done for row in g.rows])),
            "april_oldest_group_age": max((step - g.drawn_at for g in done), default=0),
        }
        return rollouts, stats

    def _restart_stale(self, version: int) -> int:
        """Restart (from the prompt) every row, finished or not, whose oldest token is more than
        ``max_age`` versions behind ``version``; returns how many."""
        if self.max_age is None:
            return 0
        n = 0
        for g in self.groups:
            for i, row in enumerate(g.rows):
                if row.oldest is not None and version - row.oldest > self.max_age:
                    g.rows[i] = _Row()
                    n += 1
        return n

    def _rollout(self, policy: Policy, g: _Group, row: _Row, reward_cfg: RewardConfig) -> Rollout:
        task = make_task(g.task_id)
        text = policy.tokenizer.decode(row.ids, skip_special_tokens=True)
        completion = Completion(prompt_ids=g.prompt_ids, completion_ids=row.ids, text=text,
                                logprobs=row.logprobs, truncated=row.ended == BUDGET)
        return Rollout(g.task_id, completion, row.oldest, score(task, text, reward_cfg))

    def drop(self) -> int:
        """Forget what is carried (a stop); returns how many groups that was."""
        n, self.groups = len(self.groups), []
        if n:
            log.info("partial rollouts: %d carried groups dropped at the stop", n)
        return n
