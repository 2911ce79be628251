"""What each peer's groups have done for this node's learning: the distinct rounds in which this
node trained on a group of it that carried a gradient (rewards that vary here: a zero-advantage
group teaches nothing and costs its sender nothing to make). The peer cache admits and ranks by
it (node/swarm/peer_cache.py), so keys that each got one group taken once weigh less than a peer
trained on round after round. The rounds are this node's own (a key cannot move them), never the
labels a sender signs.

Counted, and bounded (keys are free) but never closed to newcomers, by the one ledger of
sustained work (node/transport/work_ledger.py, rule ``PEER_WORK``: 2 rounds, 4,096 peers, idle
after 1,000 rounds): a flood of fresh keys displaces its own kind, never a long history, and a new
honest peer always gets an entry in which to build one. Pure bookkeeping: the exchange calls
``trained`` for each group a step takes (node/swarm/exchange.py ``take``); ``proven``, a peer trained
on in the rule's rounds, is the standing the peer cache and the clock watch go by.
"""

from __future__ import annotations

from swarm_node.node.transport.work_ledger import PEER_WORK, WorkLedger, WorkRule

__all__ = ["PeerWork"]


class PeerWork:
    def __init__(self, rule: WorkRule = PEER_WORK):
        self.peers = WorkLedger(rule)  # sender -> [distinct rounds trained on, last such round]

    def __len__(self) -> int:
        return len(self.peers)

    def get(self, sender: str, default: int = 0) -> int:
        """The distinct rounds of ``sender`` trained on (``default`` if none are remembered)."""
        return self.peers.rounds(sender) if sender in self.peers else default

    def proven(self, sender: str) -> bool:
        """Whether ``sender`` has standing here: trained on in the rule's distinct rounds. The peer
        cache admits by it, and the clock watch counts such peers' clocks first (one group taken
        once, even one with no gradient, was enough before)."""
        return self.peers.proven(sender)

    def trained(self, sender: str, round: int, informative: bool = True) -> None:
        """A step of this node's ``round`` took a group of ``sender``; it counts only when it
        carries a gradient (``informative``). The round is the receiver's, never the group's label:
        a key signs what labels it likes, and one step taking its groups labelled r-1 and r (the
        ``weakest`` rule can take the older first) counted two rounds of work. A round counts once,
        and only when newer than the last counted."""
        if informative:
            self.peers.record(sender, round)
