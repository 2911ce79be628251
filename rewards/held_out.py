"""The held-out seed space: task ids kept for evaluation, never trained on.

The top ``HELD_OUT_SEEDS`` seeds, [MAX_SEED - 2**20 + 1, MAX_SEED], are reserved: a node's
held-out evaluation (node/evaluate/evaluate.py) asks only these, training draws never land here
(``registry.sample_task_ids`` redraws such a seed), and admission refuses a peer's group whose
task id is here (``held_out_task``, node/swarm/admission.py), so no peer can make a node train
on the questions it is measured on. Every node derives the same evaluation ids from the families
and difficulties alone (``held_out_ids``), so two nodes' held-out numbers are on the same tasks.
"""

from __future__ import annotations

from collections.abc import Sequence

from swarm_node.protocol.task_id import MAX_SEED, TaskId
from swarm_node.rewards.errors import TaskError

__all__ = ["HELD_OUT_SEEDS", "FIRST_HELD_OUT_SEED", "is_held_out", "held_out_ids"]

HELD_OUT_SEEDS = 2**20  # seeds reserved; a uniform 63-bit draw lands here with probability 2**-43
FIRST_HELD_OUT_SEED = MAX_SEED - HELD_OUT_SEEDS + 1


def is_held_out(seed: int) -> bool:
    """True for a seed of the held-out space (evaluation only)."""
    return FIRST_HELD_OUT_SEED <= seed <= MAX_SEED


def held_out_ids(families: Sequence[str], difficulties: Sequence[int], n_per_family: int) -> list[TaskId]:
    """The evaluation ids: for each family in order, its i-th id (i = 0 .. n_per_family - 1) has
    seed MAX_SEED - i and difficulty ``difficulties[i % len(difficulties)]``.

    A pure function of its arguments: the same ids on every node, at every step, in every run.
    A family listed twice is evaluated once. Families and difficulties are the caller's
    (checked by the node's config); a family that does not exist fails in ``make_task``."""
    if type(n_per_family) is not int or not 1 <= n_per_family <= HELD_OUT_SEEDS:
        raise TaskError(f"n_per_family must be an int in 1..{HELD_OUT_SEEDS}, got {n_per_family!r}")
    if isinstance(families, str) or not families:
        raise TaskError(f"families must be a non-empty sequence of family names, got {families!r}")
    if isinstance(difficulties, str) or not difficulties:
        raise TaskError(f"difficulties must be a non-empty sequence of ints, got {difficulties!r}")
    return [TaskId(family, MAX_SEED - i, difficulties[i % len(difficulties)])
            for family in dict.fromkeys(families) for i in range(n_per_family)]
