"""Sustained work, counted one way wherever a peer earns trust by it: the distinct rounds (of the
counter's own clock, never a label a peer signs) in which a peer did work that passed, and the
last of them; bounded, because keys are free.

Three parts of the node trust a peer by it, each with its own numbers, all here side by side:

    VOUCHING    whom a carrier vouches for (node/transport/standing.py): 3 rounds, 1,024 kept,
                idle after 100 rounds
    PEER_WORK   whose groups carried a gradient here (node/swarm/peer_work.py: the peer cache
                and the clock watch go by it): 2 rounds, 4,096 kept, idle after 1,000
    FOLLOWERS   which of a learner's workers did its work (node/run/roles.py: relays are
                ordered by it): 3 steps, 512 kept, idle after 100 steps

``WorkLedger`` maps each peer to ``[rounds, last]``. A round counts once, and only when newer
than the peer's last (a burst within one round is one round of work). When an entry is added
past the limit, the weakest *other* entry goes (``weakness``): first a peer idle for longer than
the rule's ``idle`` (the longest idle first), else the one with the fewest rounds (ties: the least
recent). A flood of fresh keys displaces its own kind, never a long history, and a newcomer
always gets an entry in which to build one. Pure bookkeeping.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["WorkRule", "WorkLedger", "weakness", "VOUCHING", "PEER_WORK", "FOLLOWERS"]


@dataclass(frozen=True)
class WorkRule:
    rounds: int  # distinct rounds of work before a peer has standing
    limit: int  # peers remembered
    idle: int  # a peer without work for longer than this is the first to go (and, for some, lapses)


VOUCHING = WorkRule(rounds=3, limit=1024, idle=100)
PEER_WORK = WorkRule(rounds=2, limit=4096, idle=1000)
FOLLOWERS = WorkRule(rounds=3, limit=512, idle=100)


def weakness(entry: list[int], idle_before: int) -> tuple:
    """Sort key, the weakest first: idle peers (last work before ``idle_before``) before active
    ones, the longest idle first; then the fewest rounds, then the least recent."""
    count, last = entry
    return (0, last, count) if last < idle_before else (1, count, last)


class WorkLedger(dict):
    """peer -> ``[rounds, last round]``, at most ``rule.limit`` peers."""

    def __init__(self, rule: WorkRule):
        super().__init__()
        self.rule = rule
        self.newest = -1  # the newest round counted
        self._recent: dict[str, list[int]] = {}  # windowed peers: their last ``rule.rounds`` rounds

    def rounds(self, peer: str) -> int:
        entry = self.get(peer)
        return 0 if entry is None else entry[0]

    def proven(self, peer: str, now: int | None = None) -> bool:
        """``rule.rounds`` rounds of work, the last within ``rule.idle`` of ``now`` (None: any time)."""
        entry = self.get(peer)
        return entry is not None and entry[0] >= self.rule.rounds and (now is None or entry[1] > now - self.rule.idle)

    def record(self, peer: str, round: int, window: bool = False) -> tuple[str, list[int]] | None:
        """``peer`` worked in ``round``. With ``window``, only its rounds within ``rule.idle`` of
        this one count (of its last ``rule.rounds``): sustained work is that many rounds inside one
        window, not one round every ``idle``. Returns the entry displaced to make room, if one was."""
        self.newest = max(self.newest, round)
        entry = self.get(peer)
        if entry is not None and round <= entry[1]:
            return None
        if window:
            recent = [x for x in self._recent.get(peer, []) if x > round - self.rule.idle] + [round]
            self._recent[peer] = recent[-self.rule.rounds:]
        if entry is not None:
            entry[0] = len(self._recent[peer]) if window else entry[0] + 1
            entry[1] = round
            return None
        return self.add(peer, [1, round])

    def add(self, peer: str, entry: list[int], now: int | None = None,
            keep_new: bool = True) -> tuple[str, list[int]] | None:
        """Put ``peer``'s entry in (in the counter's round ``now``, if newer than any counted);
        past the limit, the weakest goes (returned): the weakest *other* one with ``keep_new``
        (a newcomer always gets an entry), else whichever is weakest, the newcomer included (a
        vouched set full of longer histories keeps them)."""
        if now is not None:
            self.newest = max(self.newest, now)
        self[peer] = entry
        if len(self) <= self.rule.limit:
            return None
        idle_before = self.newest - self.rule.idle
        victim = min((p for p in self if p != peer or not keep_new), key=lambda p: weakness(self[p], idle_before))
        return victim, self.pop(victim)

    def pop(self, peer, *default):
        self._recent.pop(peer, None)
        return super().pop(peer, *default)
