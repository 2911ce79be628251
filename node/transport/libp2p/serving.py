"""How often a libp2p node serves one of its own large bodies: the upload its pointers may cost it.

A body too large for gossip is announced by a pointer and fetched from its publisher over a
stream (node/transport/libp2p/transport.py). A requester is the libp2p peer id its noise handshake
proved, but ids are free (a key each), so a cap per (peer, body) alone bounds nothing: a thousand
fresh ids would each be served every body twice. ``Serves`` keeps, per body (its round):

- at most ``MAX_SERVES`` serves to one peer (a peer asking again and again is not served again);
- at most ``MAX_STRANGER_SERVES`` bodies' worth of bytes in all to peers with no admitted history
  (the node's inbox has not vouched for them: node/transport/standing.py); peers with one get
  their ``MAX_SERVES`` whatever strangers asked (at most ``MAX_VOUCHED`` of them).

A stranger's serve reserves the whole body when it starts (so serves in flight cannot overrun
the cap) and is settled by what was written (``settle``, called by the carrier once the reply is
done): a completed serve is charged the whole body, one whose requester reset the stream or
stalled only the bytes that went out. Charging at the start, as before, let 8 fresh ids that
reset their streams at once (2 serves each) use up the 16 serves of a body that nobody received,
and honest strangers got nothing. Charged by bytes, a flood that resets can pull no more than
``MAX_STRANGER_SERVES`` × the body's size, however it cuts its reads.

At most ``MAX_STRANGER_INFLIGHT`` strangers' serves of one body are in flight at once, well
below the byte budget, and the carrier ends a reply that runs past ``READ_TIMEOUT_S + size /
MIN_RATE`` (node/transport/carrier.py ``reply_deadline``). Before, 8 fresh ids asking twice each
and then reading nothing reserved all 16 bodies' worth, and the only limit on a serve was 30 s per
piece: an honest stranger was refused for as long as they kept reading a slice now and then.

So one body costs its publisher at most (``MAX_STRANGER_SERVES`` + 2 × its vouched peers) × its
size in upload, whatever the number of ids asking. Pure bookkeeping: the caller says who is vouched.
"""

from __future__ import annotations

import collections
from dataclasses import dataclass, field
from typing import Callable

__all__ = ["Serves", "MAX_SERVES", "MAX_STRANGER_SERVES", "MAX_STRANGER_INFLIGHT"]

MAX_SERVES = 2  # times one peer is served one of our bodies
MAX_STRANGER_SERVES = 16  # bodies' worth of bytes one body is served in all to peers with no admitted history
MAX_STRANGER_INFLIGHT = 4  # strangers' serves of one body at once (each reserves the whole body)


@dataclass
class Serves:
    by_peer: collections.Counter = field(default_factory=collections.Counter)  # (remote, round)
    charged: collections.Counter = field(default_factory=collections.Counter)  # round -> strangers' bytes written
    reserved: collections.Counter = field(default_factory=collections.Counter)  # round -> strangers' bytes in flight
    inflight: collections.Counter = field(default_factory=collections.Counter)  # round -> strangers' serves in flight
    refused: int = 0

    def take(self, remote: str, round: int, vouched: bool, size: int) -> Callable[[int], None] | None:
        """Whether to serve ``remote`` our ``size``-byte body of ``round`` now: None if not, else
        ``settle(written)``, to be called once with the bytes that went out."""
        if self.by_peer[remote, round] >= MAX_SERVES or (
                not vouched and (self.inflight[round] >= MAX_STRANGER_INFLIGHT
                                 or not stranger_may_start(self.charged[round], self.reserved[round], size))):
            self.refused += 1
            return None
        self.by_peer[remote, round] += 1
        if vouched:
            return lambda written: None
        self.reserved[round] += size
        self.inflight[round] += 1
        settled = False

        def settle(written: int) -> None:
            nonlocal settled
            if settled:
                return
            settled = True
            if round in self.reserved:  # (a body let go meanwhile: nothing left to charge)
                self.reserved[round] -= size
                self.inflight[round] -= 1
                self.charged[round] += min(max(written, 0), size)

        return settle

    def keep_only(self, rounds) -> None:
        """Forget the counts of bodies no longer kept."""
        for key in [k for k in self.by_peer if k[1] not in rounds]:
            del self.by_peer[key]
        for counts in (self.charged, self.reserved, self.inflight):
            for r in [r for r in counts if r not in rounds]:
                del counts[r]


def stranger_may_start(charged: int, reserved: int, size: int) -> bool:
    """Whether one more whole serve to a stranger fits in a body's cap: the bytes written to
    strangers so far and those in flight, plus this one, within ``MAX_STRANGER_SERVES`` bodies."""
    return charged + reserved + size <= MAX_STRANGER_SERVES * size
