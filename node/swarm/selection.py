"""Which pooled peer groups a step takes: the selection rules behind ``PeerPool.take``, pure.

A node re-scores every peer group with its own reward, and admission already did so once
(``AdmittedGroup.rewards``): a group whose rewards all agree teaches GRPO nothing (every
advantage is 0). ``select`` orders what a step takes by one of ``RULES``:

- ``fresh``: freshest round first, one sender at a time round-robin (the rule before selection
  existed, kept draw for draw: the same rng calls in the same order).
- ``informative``: the same, but in two passes: first only groups whose rewards vary here, then,
  if ``n`` is not filled, the others.
- ``weakest``: as ``informative``, and within each sender's queue the families this node is worst
  at first (``weakness``: family -> this node's running correctness, lowest first; a family it
  has no reading of counts as 0), freshest first among equals.

Bounds that no rule can lift: at most ``cap`` groups from one sender (``ceil(J x
max_sender_share)``, counted over the whole call, replacements included), and only what is in
the pool (what the fetch budget let in). A preference only reorders a sender's queue and the
passes; it never lengthens a queue. So a peer that crafts "informative" groups (one right and
one wrong answer, copied) buys a place ahead of honest uninformative groups, and nothing more:
never more than ``cap`` of a step, and its rows' weight stays bounded by the learner's ρ and
truncation (docs/algorithm.md, "Selecting informative groups").
"""

from __future__ import annotations

import collections
import math
import random
from typing import TYPE_CHECKING, Callable, Hashable, Mapping, Sequence, TypeVar

if TYPE_CHECKING:  # the pool imports this module
    from swarm_node.node.swarm.pool import AdmittedGroup

__all__ = ["RULES", "round_robin", "select", "sender_cap"]

RULES = ("fresh", "informative", "weakest")

T = TypeVar("T")


def sender_cap(n: int, max_sender_share: float) -> int:
    """The most groups one sender may give a step of ``n`` peer groups: ``ceil(n x share)``, at
    least 1 (the tolerance keeps 4 x 0.5 at 2 where float rounding would make it 3)."""
    return max(1, math.ceil(n * max_sender_share - 1e-9))


def _queues(groups: Sequence[AdmittedGroup], rng: random.Random) -> tuple[dict[str, list[AdmittedGroup]], list[str]]:
    """Each sender's groups, freshest first (random within a round), and the senders in turn
    order (the one with the newest group first, random among ties). The draws are the ones the
    pool always made, in the same order."""
    by_sender: dict[str, list[AdmittedGroup]] = collections.defaultdict(list)
    shuffled = list(groups)
    rng.shuffle(shuffled)
    for g in sorted(shuffled, key=lambda g: -g.round):
        by_sender[g.sender].append(g)
    senders = list(by_sender)
    rng.shuffle(senders)
    senders.sort(key=lambda s: -by_sender[s][0].round)
    return by_sender, senders


def round_robin(queues: dict[Hashable, list[T]], senders: Sequence[Hashable], n: int,
                used: collections.Counter, cap: int, want: Callable[[T], bool] = lambda x: True) -> list[T]:
    """Up to ``n`` items that ``want`` accepts, one sender at a time, each sender's queue in
    order, none past ``cap`` per sender (``used`` counts what each sender already gave). The
    picked items leave their queues. Peer groups here; the rows of the learner's supervised term
    too (node/run/peer_sft.py), under the same per-sender cap."""
    picked: list[T] = []
    progress = True
    while len(picked) < n and progress:
        progress = False
        for s in senders:
            if len(picked) >= n or used[s] >= cap:
                continue
            g = next((g for g in queues[s] if want(g)), None)
            if g is not None:
                queues[s].remove(g)
                used[s] += 1
                picked.append(g)
                progress = True
    return picked


def select(groups: Sequence[AdmittedGroup], n: int, cap: int, rule: str, rng: random.Random,
           extra: int = 0, weakness: Mapping[str, float] | None = None) -> list[AdmittedGroup]:
    """Up to ``n`` groups by ``rule``, then up to ``extra`` more that are informative (the
    replacements for this node's own uninformative groups, node/run/own_groups.py), none past
    ``cap`` from one sender across both. The result is in the order taken."""
    if rule not in RULES:
        raise ValueError(f"unknown selection rule {rule!r} (one of {', '.join(RULES)})")
    queues, senders = _queues(groups, rng)
    if rule == "weakest":  # a stable sort: freshest (then the rng's order) among equals
        w = weakness or {}
        for q in queues.values():
            q.sort(key=lambda g: w.get(g.task.id.family, 0.0))
    used: collections.Counter = collections.Counter()
    if rule == "fresh":
        picked = round_robin(queues, senders, n, used, cap, lambda g: True)
    else:
        picked = round_robin(queues, senders, n, used, cap, lambda g: g.informative)
        picked += round_robin(queues, senders, n - len(picked), used, cap, lambda g: True)
    if extra > 0:
        picked += round_robin(queues, senders, extra, used, cap, lambda g: g.informative)
    return picked
