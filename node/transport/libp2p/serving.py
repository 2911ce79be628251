"""How often a libp2p node serves one of its own large bodies: the upload its pointers may cost it.

A body too large for gossip is announced by a pointer and fetched from its publisher over a
stream (node/transport/libp2p/transport.py). A requester is the libp2p peer id its noise handshake
proved, but ids are free (a key each), so a cap per (peer, body) alone bounds nothing: a thousand
fresh ids would each be served every body twice. ``Serves`` keeps, per body (its round):

- at most ``MAX_SERVES`` serves to one peer (a peer asking again and again is not served again);
- at most ``MAX_STRANGER_SERVES`` serves in all to peers with no admitted history (the node's
  inbox has not vouched for them: node/transport/standing.py); peers with one get their
  ``MAX_SERVES`` whatever strangers asked (at most ``MAX_VOUCHED`` of them).

So one body costs its publisher at most (``MAX_STRANGER_SERVES`` + 2 × its vouched peers) × its
size in upload, whatever the number of ids asking. Pure bookkeeping: the caller says who is vouched.
"""

from __future__ import annotations

import collections
from dataclasses import dataclass, field

__all__ = ["Serves", "MAX_SERVES", "MAX_STRANGER_SERVES"]

MAX_SERVES = 2  # times one peer is served one of our bodies
MAX_STRANGER_SERVES = 16  # times one body is served in all to peers with no admitted history


@dataclass
class Serves:
    by_peer: collections.Counter = field(default_factory=collections.Counter)  # (remote, round)
    by_strangers: collections.Counter = field(default_factory=collections.Counter)  # round
    refused: int = 0

    def take(self, remote: str, round: int, vouched: bool) -> bool:
        """Whether to serve ``remote`` our body of ``round`` now (counted if so)."""
        if self.by_peer[remote, round] >= MAX_SERVES or (
                not vouched and self.by_strangers[round] >= MAX_STRANGER_SERVES):
            self.refused += 1
            return False
        self.by_peer[remote, round] += 1
        if not vouched:
            self.by_strangers[round] += 1
        return True

    def keep_only(self, rounds) -> None:
        """Forget the counts of bodies no longer kept."""
        for key in [k for k in self.by_peer if k[1] not in rounds]:
            del self.by_peer[key]
        for r in [r for r in self.by_strangers if r not in rounds]:
            del self.by_strangers[r]
