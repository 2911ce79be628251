"""Which publishers a push carrier treats as having an admitted history: sustained work, bounded.

A push carrier (gossipsub, an MQTT broker) gives publishers with a history a fast path: their
bodies keep their place in a full inbox, their gossip is checked outside the strangers' shared
budget, their large bodies get fetch slots strangers cannot take. Keys are free, so one admitted
envelope must not buy that, nor may a flood of fresh keys push the peers a node has known for a
long time out of a bounded set. ``Standing`` (pure bookkeeping; rounds are passed in):

- a publisher becomes *vouched* once envelopes of it were admitted in ``VOUCH_ROUNDS`` distinct
  rounds; until then it is a candidate (at most ``MAX_CANDIDATES``, the least recently admitted
  forgotten first);
- at most ``PROMOTIONS_PER_ROUND`` candidates become vouched a round (the newest round
  admitted); the rest stay candidates and are promoted when next admitted in a later round;
- at most ``MAX_VOUCHED`` are vouched. When a promotion goes past that, the one with the weakest
  standing goes back to being a candidate: first a publisher idle for more than ``IDLE_ROUNDS``
  rounds (the longest idle first), else the one admitted in the fewest rounds (ties: the least
  recently). A peer with a long history is displaced only by keys that have done as much work.
"""

from __future__ import annotations

import collections

__all__ = ["Standing", "VOUCH_ROUNDS", "MAX_VOUCHED", "MAX_CANDIDATES", "PROMOTIONS_PER_ROUND", "IDLE_ROUNDS"]

VOUCH_ROUNDS = 3  # distinct rounds with an admitted envelope before a publisher is vouched
MAX_VOUCHED = 1024  # publishers vouched at once
MAX_CANDIDATES = 4096  # publishers remembered on their way there
PROMOTIONS_PER_ROUND = 32  # candidates vouched a round at most
IDLE_ROUNDS = 100  # a vouched publisher not admitted for this long is the first to go


class Standing:
    def __init__(self):
        self.vouched: dict[str, list[int]] = {}  # publisher -> [rounds admitted, last round]
        self.candidates: collections.OrderedDict[str, set[int]] = collections.OrderedDict()
        self.round = -1  # the newest round admitted
        self.promoted = 0  # candidates vouched in ``round``
        self.deferred = 0  # promotions put off by the per-round cap (a count, for status)
        self.displaced = 0  # vouched publishers sent back to candidates to make room

    def __contains__(self, publisher: object) -> bool:
        return publisher in self.vouched

    def __len__(self) -> int:
        return len(self.vouched)

    def admitted(self, publisher: str, round: int) -> None:
        """An envelope of ``publisher`` for ``round`` passed every check."""
        if round > self.round:
            self.round, self.promoted = round, 0
        entry = self.vouched.get(publisher)
        if entry is not None:
            if round > entry[1]:
                entry[0] += 1
                entry[1] = round
            return
        rounds = self.candidates.pop(publisher, set())
        rounds.add(round)
        if len(rounds) >= VOUCH_ROUNDS and self.promoted < PROMOTIONS_PER_ROUND:
            self.promoted += 1
            self.vouched[publisher] = [len(rounds), max(rounds)]
            if len(self.vouched) > MAX_VOUCHED:
                self._displace()
            return
        if len(rounds) >= VOUCH_ROUNDS:
            self.deferred += 1
        self._candidate(publisher, rounds)

    def _candidate(self, publisher: str, rounds: set[int]) -> None:
        self.candidates[publisher] = set(sorted(rounds)[-VOUCH_ROUNDS:])
        while len(self.candidates) > MAX_CANDIDATES:
            self.candidates.popitem(last=False)

    def _displace(self) -> None:
        idle = self.round - IDLE_ROUNDS
        victim = min(self.vouched, key=lambda p: weakness(self.vouched[p], idle))
        count, last = self.vouched.pop(victim)
        self.displaced += 1
        self._candidate(victim, set(range(last - min(count, VOUCH_ROUNDS) + 1, last + 1)))


def weakness(entry: list[int], idle_before: int) -> tuple:
    """Sort key: the smallest goes first. Idle publishers (last admitted before ``idle_before``)
    before active ones, the longest idle first; then the fewest rounds, then the least recent."""
    count, last = entry
    return (0, last, count) if last < idle_before else (1, count, last)
