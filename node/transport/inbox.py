"""What a push carrier (an MQTT broker, gossipsub) delivered, held until the node polls for it.

A DHT is pulled: the node fetches what it wants. A broker or a gossip mesh pushes every body to
every subscriber as it comes, so the carrier must hold what arrived between two polls, and a
stranger must not be able to make that grow. ``Inbox`` keeps, bounded whatever peers send:

- whole bodies of the poll window's rounds (and ``MAX_ROUND_AHEAD`` past it: clocks drift a
  little), one per (publisher, round), newest first, within ``max_bytes``: when full, bodies of
  publishers with no admitted history make room for one with, never the reverse (who has one:
  ``vouch``, node/transport/standing.py: envelopes admitted in 3 distinct rounds of the
  receiver's, not one);
- the (publisher, sha256) of every body handed over or refused this window, so a duplicate (QoS
  1, a retained copy after a reconnect, gossip from two mesh peers) is dropped, and at most
  ``MAX_DELIVERIES`` bodies a round per publisher (a restarted node republishes once);
- the newest heartbeat of at most ``MAX_HEARD`` publishers (the least recently changed go first).

It interprets nothing: the node's verifier checks every body it hands over.
"""

from __future__ import annotations

import collections
import hashlib
from typing import Iterable

from swarm_node.node.transport.base import MAX_ANNOUNCEMENT_SIZE, MAX_ENVELOPE_SIZE, Delivery
from swarm_node.node.transport.standing import MAX_VOUCHED, Standing

__all__ = ["Inbox", "MAX_ROUND_AHEAD", "MAX_DELIVERIES", "MAX_HEARD", "MAX_VOUCHED"]

MAX_ROUND_AHEAD = 2  # rounds past the newest polled one still buffered
MAX_DELIVERIES = 2  # bodies a round handed over per publisher
MAX_HEARD = 4096  # publishers whose heartbeat is kept


class Inbox:
    def __init__(self, max_bytes: int, counts: collections.Counter, rejected: collections.Counter):
        self.max_bytes = max_bytes
        self.counts, self.rejected = counts, rejected  # the owning transport's
        self.window: tuple[int, int] | None = None  # rounds of the last poll
        self.max_size = MAX_ENVELOPE_SIZE
        self.vouched = Standing()  # publishers with an admitted history
        self._ready: dict = {}  # round -> {publisher: body}
        self._ready_bytes = 0
        self._seen: dict = {}  # round -> {(publisher, sha256)} handed out or refused
        self._delivered: dict = {}  # round -> Counter(publisher): bodies handed over
        self._heard: collections.OrderedDict = collections.OrderedDict()  # publisher -> (sha256, bytes | None)

    # -- rollout bodies ---------------------------------------------------------------------------
    def in_window(self, round: int) -> bool:
        if self.window is None:
            return True
        lo, hi = self.window
        return lo <= round <= hi + MAX_ROUND_AHEAD

    def is_vouched(self, publisher: str) -> bool:
        return publisher in self.vouched

    def offer(self, publisher: str, round: int, body: bytes) -> bool:
        """Hold ``body`` for the next poll; False if it was not kept (a duplicate, outside the
        window, or no room), counted."""
        if not self.in_window(round):
            self.counts["outside_window"] += 1
            return False
        if (publisher, hashlib.sha256(body).digest()) in self._seen.get(round, ()):
            return False  # a duplicate
        slot = self._ready.setdefault(round, {})
        old = slot.pop(publisher, None)
        if old is not None:
            self._ready_bytes -= len(old)
        if self._ready_bytes + len(body) > self.max_bytes and not self._make_room(publisher, len(body)):
            self.counts["buffer_full"] += 1
            return False
        slot[publisher] = body
        self._ready_bytes += len(body)
        return True

    def _make_room(self, publisher: str, size: int) -> bool:
        """Evict bodies of publishers with no admitted history for one of a publisher with one."""
        if publisher not in self.vouched:
            return False
        for r in sorted(self._ready):
            for p in [p for p in self._ready[r] if p not in self.vouched]:
                self._ready_bytes -= len(self._ready[r].pop(p))
                self.counts["evicted"] += 1
                if self._ready_bytes + size <= self.max_bytes:
                    return True
        return False

    def set_window(self, rounds: list[int], max_size: int | None) -> None:
        """The rounds the node polls now (sorted) and the largest body it could use: what lies
        outside is let go."""
        self.max_size = MAX_ENVELOPE_SIZE if max_size is None else min(max_size, MAX_ENVELOPE_SIZE)
        if not rounds:
            return
        self.window = (rounds[0], rounds[-1])
        self.vouched.tick(rounds[-1])  # a new round of the receiver's: who qualified is vouched
        for r in [r for r in self._ready if not self.in_window(r)]:
            self._ready_bytes -= sum(len(b) for b in self._ready.pop(r).values())
        for d in (self._seen, self._delivered):
            for r in [r for r in d if r < rounds[0]]:
                del d[r]

    def take(self, rounds: Iterable[int]) -> list[Delivery]:
        """Everything held for ``rounds``, handed over once."""
        out = []
        for r in rounds:
            for publisher, body in self._ready.pop(r, {}).items():
                self._ready_bytes -= len(body)
                self._seen.setdefault(r, set()).add((publisher, hashlib.sha256(body).digest()))
                handed = self._delivered.setdefault(r, collections.Counter())
                if handed[publisher] >= MAX_DELIVERIES:
                    self.counts["republished"] += 1
                    continue
                handed[publisher] += 1
                if len(body) > self.max_size:
                    self.rejected["oversized"] += 1
                    continue
                out.append(Delivery(r, publisher, body))
        return out

    def vouch(self, publisher: str, round: int) -> None:
        """The node admitted an envelope of ``publisher`` for ``round``. Its standing counts the
        receiver's round, the newest it polled (node/transport/standing.py): before a first poll
        there is none, and nothing counts."""
        if self.window is not None:
            self.vouched.admitted(publisher, round, self.window[1])

    # -- heartbeats -------------------------------------------------------------------------------
    def offer_heartbeat(self, publisher: str, payload: bytes) -> None:
        if len(payload) > MAX_ANNOUNCEMENT_SIZE:
            self.rejected["oversized"] += 1
            return
        digest = hashlib.sha256(payload).digest()
        old = self._heard.get(publisher)
        if old is not None and old[0] == digest:
            return
        self._heard[publisher] = (digest, payload)
        self._heard.move_to_end(publisher)  # live peers re-announce every round: they stay
        while len(self._heard) > MAX_HEARD:
            self._heard.popitem(last=False)
            self.counts["heartbeats_dropped"] += 1

    def take_heartbeats(self) -> list[Delivery]:
        out = []
        for publisher, (digest, data) in self._heard.items():
            if data is not None:
                out.append(Delivery(-1, publisher, data))
                self._heard[publisher] = (digest, None)  # handed over; the digest stays to skip repeats
        return out

    def heard(self) -> int:
        return len(self._heard)

    def buffer_sizes(self) -> dict[str, int]:
        return {"ready_rounds": len(self._ready), "ready": sum(len(v) for v in self._ready.values()),
                "seen_rounds": len(self._seen), "seen": sum(len(v) for v in self._seen.values()),
                "heard": len(self._heard), "vouched": len(self.vouched),
                "vouch_candidates": len(self.vouched.candidates)}
