"""What each peer's groups have done for this node's learning: the distinct rounds in which this
node trained on a group of it that carried a gradient (rewards that vary here: a zero-advantage
group teaches nothing and costs its sender nothing to make). The peer cache admits and ranks by
it (node/swarm/peer_cache.py), so keys that each got one group taken once weigh less than a peer
trained on round after round. The rounds are this node's own (a key cannot move them), never the
labels a sender signs.

Bounded (keys are free) but never closed to newcomers: at most ``LIMIT`` peers; when a new one
comes past that, the weakest *other* entry goes: first a peer idle for more than ``IDLE_ROUNDS``
rounds (the longest idle first), else the one with the fewest rounds (ties: the least recently
trained on). A flood of fresh keys displaces its own kind, never a long history, and a new
honest peer always gets an entry in which to build one. Pure bookkeeping: the exchange calls
``trained`` for each group a step takes (node/swarm/exchange.py ``take``); ``proven``, a peer trained
on in ``MIN_ROUNDS`` rounds, is the standing the peer cache and the clock watch go by.
"""

from __future__ import annotations

__all__ = ["PeerWork", "LIMIT", "IDLE_ROUNDS", "MIN_ROUNDS"]

LIMIT = 4096  # peers whose work is remembered (a step takes at most J groups: new senders come slowly)
IDLE_ROUNDS = 1000  # a peer not trained on for this long is the first to go
MIN_ROUNDS = 2  # distinct rounds trained on (with a gradient) before a peer has standing (``proven``)


class PeerWork:
    def __init__(self, limit: int = LIMIT):
        self.limit = limit
        self.peers: dict[str, list[int]] = {}  # sender -> [distinct rounds trained on, last such round]
        self.newest = -1  # the newest round counted

    def __len__(self) -> int:
        return len(self.peers)

    def get(self, sender: str, default: int = 0) -> int:
        """The distinct rounds of ``sender`` trained on (``default`` if none are remembered)."""
        entry = self.peers.get(sender)
        return default if entry is None else entry[0]

    def proven(self, sender: str) -> bool:
        """Whether ``sender`` has standing here: trained on in ``MIN_ROUNDS`` distinct rounds. The
        peer cache admits by it, and the clock watch counts such peers' clocks first (one group
        taken once, even one with no gradient, was enough before)."""
        return self.get(sender) >= MIN_ROUNDS

    def trained(self, sender: str, round: int, informative: bool = True) -> None:
        """A step of this node's ``round`` took a group of ``sender``; it counts only when it
        carries a gradient (``informative``). The round is the receiver's, never the group's label:
        a key signs what labels it likes, and one step taking its groups labelled r-1 and r (the
        ``weakest`` rule can take the older first) counted two rounds of work. A round counts once,
        and only when newer than the last counted."""
        if not informative:
            return
        self.newest = max(self.newest, round)
        entry = self.peers.get(sender)
        if entry is not None:
            if round > entry[1]:
                entry[0] += 1
                entry[1] = round
            return
        self.peers[sender] = [1, round]
        if len(self.peers) > self.limit:
            idle = self.newest - IDLE_ROUNDS
            victim = min((p for p in self.peers if p != sender), key=lambda p: _weakness(self.peers[p], idle))
            del self.peers[victim]


def _weakness(entry: list[int], idle_before: int) -> tuple:
    """Sort key, the weakest first: idle peers before active ones (the longest idle first), then
    the fewest rounds, then the least recently trained on."""
    count, last = entry
    return (0, last, count) if last < idle_before else (1, count, last)
