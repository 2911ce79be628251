"""Bodies larger than the broker's packet limit, split into parts and put back together.

A broker caps what one PUBLISH may carry (Mosquitto's ``max_packet_size``, announced in its
MQTT 5 CONNACK; many hosted brokers allow 256 KiB). A node's envelope can be up to 4 MiB, so it
travels as ``count`` parts, each on a topic of its own (``.../<i>``: a retained message is kept
per topic, so a node that subscribes late still finds every part), each carrying::

    magic "snp1" | digest (sha256 of the whole body, 32 B) | u16 index | u16 count | u32 total | bytes

Parts are not signed: the body they make up is a signed envelope, checked as a whole by the node
(``protocol.signing``); here a part only has to be consistent with its siblings (same digest,
count and total, no more bytes than the total) and the whole must hash to the digest. Whoever
sends parts is a claim on this node's memory, so ``Reassembler`` bounds it: one body being put
together per slot and two per owner (a publisher), a budget over the bytes all of them hold
(what a part carries, not what its header declares), the declared total checked against the most
the node will take before any part is kept, and partial bodies forgotten after ``max_age``
seconds.
"""

from __future__ import annotations

import hashlib
import struct
import time
from dataclasses import dataclass, field

__all__ = ["split", "parse_part", "Part", "Reassembler", "PartError", "TooLarge", "NoRoom", "HEADER_SIZE"]

MAGIC = b"snp1"
_HEADER = struct.Struct(">4s32sHHI")
HEADER_SIZE = _HEADER.size
MAX_PARTS = 4096


class PartError(ValueError):
    """A part that cannot belong to any body (bad header, sizes that do not add up)."""


class TooLarge(PartError):
    """A body declared larger than the receiver takes."""


class NoRoom(PartError):
    """The budget for partial bodies is spent (not the sender's fault alone)."""


@dataclass(frozen=True)
class Part:
    digest: bytes
    index: int
    count: int
    total: int
    data: bytes


def split(body: bytes, part_size: int) -> list[bytes]:
    """``body`` as the payloads of its parts, each at most ``part_size`` bytes with its header."""
    room = part_size - HEADER_SIZE
    if room <= 0:
        raise ValueError(f"a part of {part_size} bytes has no room past its {HEADER_SIZE}-byte header")
    count = max(1, -(-len(body) // room))
    if count > MAX_PARTS:
        raise ValueError(f"{len(body)} bytes would take {count} parts of {part_size} bytes (at most {MAX_PARTS})")
    digest = hashlib.sha256(body).digest()
    return [_HEADER.pack(MAGIC, digest, i, count, len(body)) + body[i * room:(i + 1) * room]
            for i in range(count)]


def parse_part(payload: bytes) -> Part:
    if len(payload) < HEADER_SIZE:
        raise PartError(f"{len(payload)} bytes: shorter than a part header")
    magic, digest, index, count, total = _HEADER.unpack_from(payload)
    if magic != MAGIC:
        raise PartError("not a swarm-node part (bad magic)")
    if not 0 < count <= MAX_PARTS or index >= count:
        raise PartError(f"part {index} of {count}")
    data = payload[HEADER_SIZE:]
    if len(data) > total or count == 1 and len(data) != total:
        raise PartError(f"part {index} of {count} holds {len(data)} bytes of a {total}-byte body")
    return Part(digest, index, count, total, data)


@dataclass
class _Partial:
    owner: object
    digest: bytes
    count: int
    total: int
    started: float
    parts: dict = field(default_factory=dict)  # index -> bytes
    held: int = 0  # bytes of the parts in


@dataclass
class Reassembler:
    """Partial bodies per slot (a slot: a publisher's body for a round, say), bounded: the bytes
    actually held over all of them (a first part that only *declares* 4 MiB costs what it carries),
    ``per_owner`` partial bodies per owner at once (a publisher's newest ones), and an age."""

    max_bytes: int  # over every partial body together
    max_age: float = 30.0
    per_owner: int = 2
    _partial: dict = field(default_factory=dict, init=False)  # slot -> _Partial, oldest first
    held: int = field(default=0, init=False)  # bytes of all partial bodies' parts

    def add(self, slot, part: Part, max_total: int, now: float | None = None, owner=None,
            may_evict=None) -> bytes | None:
        """Keep ``part`` for ``slot`` (of ``owner``); the whole body once its last part is in (None
        before). Raises ``TooLarge`` for a body over ``max_total`` (nothing is kept), ``NoRoom`` when
        the byte budget is spent (``may_evict(owner)``: partial bodies of such owners may go to make
        room, say strangers' for a peer with a history), ``PartError`` for parts that do not add up."""
        now = time.monotonic() if now is None else now
        if part.total > max_total:
            raise TooLarge(f"a body of {part.total} bytes is over the {max_total}-byte limit")
        if part.count == 1:
            self._drop(slot)
            return self._check(part.digest, part.data)
        if self.held + len(part.data) > self.max_bytes:
            self.expire(now)  # (only when it matters: the scan is over every partial body)
        cur = self._partial.get(slot)
        if cur is None or cur.digest != part.digest or cur.count != part.count or cur.total != part.total:
            self._drop(slot)  # a newer body replaces the one being put together (a republished round)
            self.expire(now)
            mine = [s for s, p in self._partial.items() if p.owner == owner]
            for s in mine[:max(0, len(mine) - self.per_owner + 1)]:
                self._drop(s)  # an owner's oldest partial body gives way to its newest
            cur = self._partial[slot] = _Partial(owner, part.digest, part.count, part.total, now)
        if part.index in cur.parts:
            return None  # a duplicate (QoS 1 delivers at least once)
        if cur.held + len(part.data) > cur.total:
            self._drop(slot)
            raise PartError(f"parts of a {cur.total}-byte body hold more than that")
        if self.held + len(part.data) > self.max_bytes and not self._make_room(len(part.data), slot, may_evict):
            raise NoRoom(f"{self.held} bytes of partial bodies held: no room for {len(part.data)} more")
        cur.parts[part.index] = part.data
        cur.held += len(part.data)
        self.held += len(part.data)
        if len(cur.parts) < cur.count:
            return None
        self._drop(slot)
        return self._check(cur.digest, b"".join(cur.parts[i] for i in range(cur.count)))

    def _make_room(self, size: int, slot, may_evict) -> bool:
        if may_evict is None:
            return False
        for s in [s for s, p in self._partial.items() if s != slot and may_evict(p.owner)]:
            self._drop(s)
            if self.held + size <= self.max_bytes:
                return True
        return False

    def _check(self, digest: bytes, body: bytes) -> bytes:
        # The sizes add up only if the digest does too: no separate length check is needed.
        if hashlib.sha256(body).digest() != digest:
            raise PartError("the parts do not hash to their digest")
        return body

    def _drop(self, slot) -> None:
        cur = self._partial.pop(slot, None)
        if cur is not None:
            self.held -= cur.held

    def expire(self, now: float | None = None) -> int:
        """Forget partial bodies older than ``max_age``; how many were forgotten."""
        now = time.monotonic() if now is None else now
        old = [s for s, p in self._partial.items() if now - p.started > self.max_age]
        for s in old:
            self._drop(s)
        return len(old)

    def forget(self, keep) -> None:
        """Forget partial bodies whose slot ``keep(slot)`` refuses (rounds out of the window)."""
        for s in [s for s in self._partial if not keep(s)]:
            self._drop(s)

    def __len__(self) -> int:
        return len(self._partial)
