"""The held-out questions: what a node keeps its training and its peers' groups away from.

Reserving the held-out *seeds* (rewards/held_out.py) is not enough: two seeds can generate the
same question, and the built-in families' easiest levels have few (at level 1: arithmetic about
100, counting 56, base conversion 16, boolean 10), so training would meet most held-out questions
under other seeds, and a peer could send them on purpose. A node therefore reserves the held-out
*questions*: ``HeldOutSet.holds`` is true for any task, whatever its seed and level, whose
(family, question) is one of them (some questions come up at two levels). Training redraws such a task (``registry.sample_task_ids``'s
``exclude``), and admission drops such a peer group (node/swarm/admission.py, counted as
``dropped_held_out``, no fault of the sender: its node may evaluate on other questions).

The set is a pure function of (families, levels, tasks per family): the evaluation ids walk the
held-out seeds in order (family f's i-th candidate: seed MAX_SEED - i, level cycling through the
given ones), keep the first task of each question, and stop at ``n_per_family`` questions. A level
never gives up more than ``MAX_RESERVED_SHARE`` of its questions (its size estimated from
``PROBE_DRAWS`` draws, ``level_size``), so a small family keeps most of its questions for training
and is evaluated on fewer tasks (its ``n`` says how many). The distinct questions seen in the draws
are a lower bound, far below a large level's size (level-2 counting: 368 of about 1,700 in 512
draws), so for an evaluation of more than 64 tasks a family a level where most draws were new is
drawn further, doubling up to ``MAX_PROBE_DRAWS``, until they show enough: 256 counting questions
at level 2, not 92. The sets of up to 64 tasks a family are those of the first 512 draws, as
before. A family with no level of at least
1 / MAX_RESERVED_SHARE questions (a dataset of 3 rows), or whose held-out seeds keep drawing
questions already taken, gets none: it is listed in ``unevaluated``, trains on all its questions
and is left out of the evaluation.
"""

from __future__ import annotations

import functools
import math
import random
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

from swarm_node.protocol.task_id import MAX_SEED, TaskId
from swarm_node.rewards.held_out import held_out_ids
from swarm_node.rewards.registry import make_task
from swarm_node.rewards.task import Task

__all__ = ["HeldOutSet", "held_out_set", "level_size", "why_unevaluated", "MAX_RESERVED_SHARE", "PROBE_DRAWS", "MAX_PROBE_DRAWS"]

MAX_RESERVED_SHARE = 0.25  # of a level's questions, at most, held out of training
PROBE_DRAWS = 512  # tasks drawn to estimate a level's number of questions (about 0.01 s)
MAX_PROBE_DRAWS = 16384  # at most, for a large level an evaluation wants many questions of (about 0.3 s)
CANDIDATES_PER_TASK = 64  # held-out seeds tried per wanted task before a family settles for fewer


@dataclass(frozen=True)
class HeldOutSet:
    """The evaluation's tasks (one per question) and the questions training and admission avoid."""

    ids: tuple[TaskId, ...]
    questions: frozenset[tuple[str, str]]  # (family, question)
    unevaluated: tuple[str, ...] = ()  # families that got no held-out question (evaluated on nothing)

    def holds(self, task: Task) -> bool:
        """True when ``task`` asks a held-out question (whatever its seed and level)."""
        return (task.id.family, task.question) in self.questions

    def holds_id(self, task_id: TaskId) -> bool:
        """``holds`` for an id (regenerates its task)."""
        return self.holds(make_task(task_id))


@functools.lru_cache(maxsize=256)
def level_size(family: str, difficulty: int, need: int = 0) -> int | None:
    """About how many distinct questions ``family`` asks at ``difficulty``: the number seen in
    ``PROBE_DRAWS`` fixed draws (a lower bound), or None when every draw was new (too many to matter).

    With a ``need`` above ``PROBE_DRAWS / 2``, a level where more than a quarter of the draws were
    new questions (it is larger than the draws show) and fewer than ``need`` were seen is drawn
    further, the draws doubling (the same stream: the first draws stay the same) up to
    ``MAX_PROBE_DRAWS``, until ``need`` are seen or most draws repeat. A smaller ``need`` (an
    evaluation of up to 64 tasks a family, every run's before this rule) keeps the first draws'
    answer, so its questions stay the ones it had. A larger ``need`` only draws further: a smaller
    one stopped once it saw ``need`` (a cap that then never binds) or for the same reason as the
    larger, so each count's held-out set stays a prefix of a larger count's (tested for the built-in
    families at every set of levels 1-3)."""
    if need <= PROBE_DRAWS // 2:
        need = 0
    rng = random.Random(f"swarm-node:level-size:{family}:{difficulty}")
    seen: set[str] = set()
    draws = 0
    while True:
        for _ in range(draws or PROBE_DRAWS):
            seen.add(make_task(TaskId(family, rng.randint(0, MAX_SEED >> 1), difficulty)).question)
        draws = draws * 2 or PROBE_DRAWS
        if len(seen) == draws:
            return None
        if len(seen) >= need or 4 * len(seen) <= draws or draws >= MAX_PROBE_DRAWS:
            return len(seen)


@functools.lru_cache(maxsize=16)
def _held_out_set(families: tuple[str, ...], difficulties: tuple[int, ...], n_per_family: int) -> HeldOutSet:
    ids: list[TaskId] = []
    questions: set[tuple[str, str]] = set()
    unevaluated: list[str] = []
    for family in dict.fromkeys(families):
        # A level of fewer than 1 / MAX_RESERVED_SHARE questions gives none: holding out the only
        # question of a 1-row dataset would leave training nothing to draw there.
        need = math.ceil(n_per_family / MAX_RESERVED_SHARE)  # a level's questions for n_per_family of them
        caps = {d: (n_per_family if (size := level_size(family, d, need)) is None
                    else int(size * MAX_RESERVED_SHARE)) for d in difficulties}
        per_level: Counter = Counter()
        candidates = held_out_ids([family], difficulties, min(n_per_family * CANDIDATES_PER_TASK, 2**20))
        kept = 0
        for task_id in candidates:
            if kept == n_per_family:
                break
            key = (family, make_task(task_id).question)
            if key in questions or per_level[task_id.difficulty] >= caps[task_id.difficulty]:
                continue
            questions.add(key)
            per_level[task_id.difficulty] += 1
            ids.append(task_id)
            kept += 1
        if not kept:
            unevaluated.append(family)
    return HeldOutSet(tuple(ids), frozenset(questions), tuple(unevaluated))


def held_out_set(families: Sequence[str], difficulties: Sequence[int], n_per_family: int) -> HeldOutSet:
    """The held-out tasks and questions of a node that trains on ``families`` at ``difficulties``
    and evaluates ``n_per_family`` tasks a family (computed once per arguments)."""
    return _held_out_set(tuple(families), tuple(difficulties), int(n_per_family))


def why_unevaluated(family: str, difficulties: Sequence[int]) -> str:
    """Why ``family`` got no held-out question at ``difficulties`` (one of ``unevaluated``), in words."""
    fewest = math.ceil(1 / MAX_RESERVED_SHARE)
    sizes = {d: level_size(family, d) for d in dict.fromkeys(difficulties)}
    if all(n is not None and n < fewest for n in sizes.values()):
        have = ", ".join(f"level {d}: {n}" for d, n in sizes.items())
        return (f"no level has the {fewest} questions it takes to hold one out ({have}; at most "
                f"{MAX_RESERVED_SHARE:.0%} of a level's questions are kept from training)")
    return f"its held-out seeds kept asking questions already taken ({CANDIDATES_PER_TASK} tries a task)"
