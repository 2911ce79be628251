"""The pool of admitted peer groups: what it holds, what that costs, and which groups a step takes.

A group is one peer's completions of one task in one round: the unit GRPO needs for a baseline.
Admission (node/swarm/admission.py) makes each one an ``AdmittedGroup``, with its outcome on it:
the regenerated task and whether the peer's token ids are this node's. ``PeerPool`` keeps them
until a step takes them or they age out of the window.

Memory is bounded whatever peers send: at most ``MAX_SENDER_BYTES`` pooled per sender (its own
oldest evicted first) and ``MAX_POOL_GROUPS`` groups / ``MAX_POOL_BYTES`` in all (the largest
holder's oldest first). ``take`` hands out up to J groups, freshest first (or informative first,
node/swarm/selection.py) and spread across peers, at most ⌈J × max_sender_share⌉ from one.
"""

from __future__ import annotations

import collections
import random
import sys
from dataclasses import dataclass
from typing import Mapping

from swarm_node.protocol.messages import RolloutRecord
from swarm_node.node.swarm.selection import select as select_groups, sender_cap
from swarm_node.rewards.task import Task

__all__ = ["PeerGroup", "AdmittedGroup", "PeerPool", "group_bytes", "MAX_POOL_GROUPS", "MAX_POOL_BYTES",
           "MAX_SENDER_BYTES"]

MAX_POOL_GROUPS = 4096  # admitted, unused groups kept at once
MAX_POOL_BYTES = 256 << 20  # ... and their size (ids, log-probs, text: group_bytes), whoever sent them
MAX_SENDER_BYTES = 32 << 20  # one sender's share: about two full 4 MiB envelopes once decoded


@dataclass(frozen=True)
class PeerGroup:
    """A peer's completions of one task in one round: one GRPO group for this node's learner."""

    sender: str
    round: int
    policy_version: int
    model_fingerprint: str
    tokenizer_fingerprint: str
    task_id: str
    records: tuple[RolloutRecord, ...]

    @property
    def key(self) -> str:
        return f"{self.sender}/{self.round}/{self.task_id}"


@dataclass(frozen=True)
class AdmittedGroup(PeerGroup):
    """A group as admission left it, with what it decided once, so the learner only converts and
    scores (node/run/rollouts.py ``external_samples``): its records are already the first
    ``group_cap`` that fit the exchange's ``max_tokens`` (a foreign tokenizer's: by text bytes)."""

    task: Task  # regenerated from task_id (a task id naming none is refused, bad_task): scored against
    # Same tokenizer as this node (protocol.messages.same_tokenizer): the ids and per-token log-probs are
    # used as sent. Otherwise the text is re-tokenized and only the sequence log-prob transfers.
    token_level: bool
    # Each kept completion's reward under this node's scoring (rewards/scoring.py), scored at
    # admission: only to choose groups (node/swarm/selection.py). The learner scores again and
    # trains on its own scores (node/run/rollouts.py external_samples).
    rewards: tuple[float, ...] = ()

    @property
    def informative(self) -> bool:
        """Rewards that vary: a group GRPO can learn from (all equal: every advantage is 0)."""
        return len(set(self.rewards)) > 1


def group_bytes(g: PeerGroup) -> int:
    """What a pooled group costs in memory, from above: a record's ids and log-probs are tuples of
    Python ints and floats (an 8-byte slot plus a 28- or 24-byte object each), its text a str
    (``sys.getsizeof``: up to 4 bytes a character), plus the record itself."""
    return sum(200 + 68 * len(r.completion_ids) + sys.getsizeof(r.completion_text) for r in g.records)


class PeerPool:
    """Admitted, unused groups in admission order, with their sizes per group, per sender and in all."""

    def __init__(self, rng: random.Random):
        self.groups: dict[str, AdmittedGroup] = {}  # key -> group, in admission order
        self.sizes: dict[str, int] = {}  # key -> group_bytes of that group
        self.sender_bytes: collections.Counter = collections.Counter()  # sender -> bytes pooled
        self.bytes = 0
        self._rng = rng  # take's shuffles

    def __len__(self) -> int:
        return len(self.groups)

    def add(self, g: AdmittedGroup) -> None:
        size = group_bytes(g)
        self.groups[g.key] = g
        self.sizes[g.key] = size
        self.sender_bytes[g.sender] += size
        self.bytes += size

    def drop(self, key: str) -> AdmittedGroup:
        g = self.groups.pop(key)
        size = self.sizes.pop(key)
        self.bytes -= size
        self.sender_bytes[g.sender] -= size
        if self.sender_bytes[g.sender] <= 0:
            del self.sender_bytes[g.sender]
        return g

    def bound(self, sender: str) -> int:
        """Memory per sender and in all: a sender over its share loses its own oldest groups
        first, so a flood costs the flooder, not honest peers; then the pool as a whole sheds its
        oldest groups down to its count and byte limits. Returns how many groups were evicted."""
        evicted = 0
        while self.sender_bytes.get(sender, 0) > MAX_SENDER_BYTES:
            self.drop(next(k for k, g in self.groups.items() if g.sender == sender))
            evicted += 1
        while len(self.groups) > MAX_POOL_GROUPS or self.bytes > MAX_POOL_BYTES:
            # The largest holder gives way (its oldest group): with oldest-first alone, a flood of
            # fresh keys would push every honest group out.
            biggest = max(self.sender_bytes, key=self.sender_bytes.__getitem__)
            self.drop(next(k for k, g in self.groups.items() if g.sender == biggest))
            evicted += 1
        return evicted

    def prune(self, oldest: int) -> int:
        """Drop the groups of rounds before ``oldest``; returns how many."""
        stale = [k for k, g in self.groups.items() if g.round < oldest]
        for k in stale:
            self.drop(k)
        return len(stale)

    def take(self, n: int, max_sender_share: float, select: str = "fresh", extra: int = 0,
             weakness: Mapping[str, float] | None = None) -> list[AdmittedGroup]:
        """Up to ``n`` groups, out of the pool, by the rule ``select`` (node/swarm/selection.py):
        ``fresh``, freshest round first, one sender at a time round-robin, random within a
        sender's round; ``informative``, the same but groups whose rewards vary under this node's
        scoring first; ``weakest``, as informative, each sender's groups of the families this node
        is worst at (``weakness``: family -> its running correctness) first. Then up to ``extra``
        more informative ones (replacements for this node's own uninformative groups). At most
        ``ceil(n x max_sender_share)`` from any one sender, counted on ``n`` over the whole call,
        extras included (so one fast or flooding key cannot fill a step; keys are free, so this is
        fairness between keys, and the fetch budget and the per-source ρ bound what one operator
        with many can do).

        What a hostile peer buys with a crafted "informative" group (copies of a right and a wrong
        answer, with whatever log-probs admission allows): a place ahead of honest uninformative
        groups, never more than its share of a step, never a group the fetch budget kept out of the
        pool, and rows whose weight the learner bounds per source (policies/learner.py, the
        per-source ρ and truncation)."""
        picked = select_groups(list(self.groups.values()), n, sender_cap(n, max_sender_share), select, self._rng, extra, weakness)
        for g in picked:
            self.drop(g.key)
        return picked
