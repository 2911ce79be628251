"""How many envelope downloads a hivemind host serves at once, in all and per remote peer
(pure bookkeeping; the transport's stream handler takes and gives back the slots).

A slot is held from a stream's first byte to its last, so a peer that opens streams and trickles
its request holds slots while spending almost no bandwidth. With no share per peer, a few such
peers held all of a host's slots and every honest download was turned away; readers then gave its
publisher up. Each remote peer gets at most ``PER_PEER`` of the ``TOTAL`` slots (an honest reader
fetches one body of a publisher per round, two when rounds overlap), and the request itself must
arrive within a short deadline (node/transport/hivemind/rollout_stream.py ``REQUEST_TIMEOUT_S``).
"""

from __future__ import annotations

import collections

__all__ = ["ServeSlots", "TOTAL", "PER_PEER"]

TOTAL = 16  # downloads served at once; more are turned away
PER_PEER = 2  # of those, one remote peer's at most


class ServeSlots:
    def __init__(self, total: int = TOTAL, per_peer: int = PER_PEER) -> None:
        self.total, self.per_peer = total, per_peer
        self.held: collections.Counter[str] = collections.Counter()  # remote peer -> slots held
        self.refused = 0  # streams turned away (full, or that peer's share used)

    def take(self, peer: str) -> bool:
        """Whether a stream from ``peer`` may be served now (if so, it holds a slot until ``give``)."""
        if sum(self.held.values()) >= self.total or self.held[peer] >= self.per_peer:
            self.refused += 1
            return False
        self.held[peer] += 1
        return True

    def give(self, peer: str) -> None:
        self.held[peer] -= 1
        if self.held[peer] <= 0:
            del self.held[peer]  # bounded: only peers holding a slot are remembered
