"""Which publishers a carrier treats as having an admitted history: sustained work, bounded.

A push carrier (gossipsub, an MQTT broker) gives publishers with a history a fast path: their
bodies keep their place in a full inbox, their gossip is checked outside the strangers' shared
budget, their large bodies get fetch slots strangers cannot take; a pull carrier (hivemind) fetches
them first. Keys are free, so one admitted envelope must not buy that, nor may a flood of fresh
keys push the peers a node has known for a long time out of a bounded set, nor take every place
a newcomer could get. ``Standing`` is the one rule for every carrier (pure bookkeeping; rounds are
passed in):

- rounds are the *receiver's*: an envelope counts for the receiver's round ``now`` in which it was
  admitted, never for the round its label names (a key can sign the labels of five rounds in one
  round; it cannot make the receiver's clock move). An envelope whose label is ahead of ``now``
  or more than ``BEHIND`` rounds behind it counts for nothing here (``counts``): an honest peer's
  envelope is admitted in the round it names or soon after;
- a publisher is a *candidate* until it was admitted in ``VOUCH_ROUNDS`` distinct receiver rounds
  (at most ``MAX_CANDIDATES`` are remembered, the least recently admitted forgotten first). One
  not admitted for more than ``LAPSE_ROUNDS`` rounds starts over: a place in the queue is kept
  by work, not bought once;
- at each new receiver round at most ``PROMOTIONS_PER_ROUND`` of the candidates that qualified
  are vouched, the longest waiting first (the earliest first admitted: ``promotion_order``). A
  flood of keys whose bodies arrive first in every round (labelled a round ahead and queued
  early) therefore cannot take every promotion: an honest newcomer waits behind the keys that came
  before it, never behind those that came after;
- at most ``MAX_VOUCHED`` are vouched. When a promotion goes past that, the one with the weakest
  standing goes back to being a candidate (at the back of the queue): first a publisher idle for
  more than ``IDLE_ROUNDS`` rounds (the longest idle first), else the one admitted in the fewest
  rounds (ties: the least recently). A peer with a long history is displaced only by keys that
  have done as much work. The vouched set is the one ledger of sustained work
  (node/transport/work_ledger.py, rule ``VOUCHING``), as the exchange's and the learner's are.
"""

from __future__ import annotations

import collections
from dataclasses import dataclass, field

from swarm_node.node.transport.work_ledger import VOUCHING, WorkLedger

__all__ = ["Standing", "counts", "promotion_order", "VOUCH_ROUNDS", "MAX_VOUCHED", "MAX_CANDIDATES",
           "PROMOTIONS_PER_ROUND", "IDLE_ROUNDS", "BEHIND", "LAPSE_ROUNDS"]

# The vouching rule's numbers are the sustained-work table's (node/transport/work_ledger.py).
VOUCH_ROUNDS = VOUCHING.rounds  # distinct receiver rounds with an admitted envelope before a publisher is vouched
MAX_VOUCHED = VOUCHING.limit  # publishers vouched at once
MAX_CANDIDATES = 4096  # publishers remembered on their way there
PROMOTIONS_PER_ROUND = 32  # candidates vouched a round at most
IDLE_ROUNDS = VOUCHING.idle  # a vouched publisher not admitted for this long is the first to go
BEHIND = 2  # an envelope labelled further behind the receiver's round earns no standing
LAPSE_ROUNDS = 8  # a candidate not admitted for longer than this starts over


def counts(label: int, now: int) -> bool:
    """Whether an envelope labelled ``label``, admitted in the receiver's round ``now``, counts
    toward its publisher's standing: labels ahead of the receiver (bodies queued early) and far
    behind it (old ones kept back) do not."""
    return now - BEHIND <= label <= now


@dataclass
class Candidate:
    since: int  # order of first admission (a counter): the smaller, the longer it has waited
    last: int  # the receiver's round it was last admitted in
    rounds: set = field(default_factory=set)  # distinct receiver rounds admitted (the newest few)


def promotion_order(candidates: dict, now: int, most: int) -> list[str]:
    """Up to ``most`` candidates to vouch as the receiver's round ``now`` begins: those admitted in
    ``VOUCH_ROUNDS`` distinct rounds and not lapsed, the longest waiting first."""
    ready = [p for p, c in candidates.items()
             if len(c.rounds) >= VOUCH_ROUNDS and c.last >= now - LAPSE_ROUNDS]
    ready.sort(key=lambda p: candidates[p].since)
    return ready[:max(most, 0)]


class Standing:
    def __init__(self):
        self.vouched = WorkLedger(VOUCHING)  # publisher -> [rounds admitted, last round]
        self.candidates: collections.OrderedDict[str, Candidate] = collections.OrderedDict()  # LRU
        self.round = -1  # the receiver's newest round seen
        self.promoted = 0  # candidates vouched as ``round`` began
        self.deferred = 0  # qualified candidates left waiting by the per-round cap (a count, for status)
        self.displaced = 0  # vouched publishers sent back to candidates to make room
        self.ignored = 0  # admitted envelopes whose label earned no standing (``counts``)
        self._order = 0  # the next candidate's ``since``

    def __contains__(self, publisher: object) -> bool:
        return publisher in self.vouched

    def __len__(self) -> int:
        return len(self.vouched)

    def admitted(self, publisher: str, label: int, now: int) -> None:
        """An envelope of ``publisher`` labelled ``label`` passed every check in the receiver's
        round ``now``."""
        self.tick(now)
        if not counts(label, now):
            self.ignored += 1
            return
        entry = self.vouched.get(publisher)
        if entry is not None:
            if now > entry[1]:
                entry[0] += 1
                entry[1] = now
            return
        c = self.candidates.pop(publisher, None)
        if c is None or c.last < now - LAPSE_ROUNDS:
            c = self._new(now)
        c.rounds.add(now)
        c.rounds = set(sorted(c.rounds)[-VOUCH_ROUNDS:])
        c.last = max(c.last, now)
        self._remember(publisher, c)

    def tick(self, now: int) -> None:
        """The receiver's round is ``now`` (it polled it, or admitted an envelope in it): as a new
        round begins, the candidates that qualified are vouched."""
        if now > self.round:
            self._promote(now)

    def forget(self, publisher: str) -> None:
        """``publisher`` lost its standing (its body failed verification, or it stopped serving):
        it starts over as a stranger."""
        self.vouched.pop(publisher, None)
        self.candidates.pop(publisher, None)

    def _promote(self, now: int) -> None:
        """A new receiver round: vouch the candidates that qualified, the longest waiting first."""
        self.round = now
        ready = promotion_order(self.candidates, now, len(self.candidates))
        chosen = ready[:PROMOTIONS_PER_ROUND]
        self.deferred += len(ready) - len(chosen)
        self.promoted = len(chosen)
        for publisher in chosen:
            c = self.candidates.pop(publisher)
            out = self.vouched.add(publisher, [len(c.rounds), c.last], now=self.round, keep_new=False)
            if out is not None:
                self._back_to_candidates(*out)

    def _new(self, now: int) -> Candidate:
        self._order += 1
        return Candidate(since=self._order, last=now)

    def _remember(self, publisher: str, c: Candidate) -> None:
        self.candidates[publisher] = c
        while len(self.candidates) > MAX_CANDIDATES:
            self.candidates.popitem(last=False)

    def _back_to_candidates(self, victim: str, entry: list[int]) -> None:
        """A vouched publisher displaced to make room goes back to the candidates, at the back
        of the queue, with the rounds it had (up to VOUCH_ROUNDS)."""
        count, last = entry
        self.displaced += 1
        c = self._new(last)
        c.rounds = set(range(last - min(count, VOUCH_ROUNDS) + 1, last + 1))
        self._remember(victim, c)
