"""A large body served over a stream to strangers whose streams reset mid-write or read slowly
(node/transport/libp2p/serving.py, node/transport/carrier.py ``serve_stream``): what a reset
serve costs is what went out, the upload to strangers stays bounded, and slow readers are cut
at the reply's deadline."""

from __future__ import annotations

import asyncio
import struct
import time

import msgpack

import swarm_node.node.transport.carrier as carrier_module
from swarm_node.node.transport.libp2p.carrier import Libp2pCarrier
from swarm_node.node.transport.libp2p.host import libp2p_peer_id
from swarm_node.node.transport.libp2p.serving import MAX_STRANGER_INFLIGHT, MAX_STRANGER_SERVES, Serves
from swarm_node.protocol.identity import Identity
from tests.helpers.libp2p_net import transport

SIZE = 2_000_000


class Stream:
    """One requester's end of a stream: it asks for round 7's body and, after ``reset_after``
    bytes of the reply have gone out, resets the stream (None: reads it all)."""

    def __init__(self, reset_after: int | None):
        request = msgpack.packb([7])
        self._in = struct.pack(">I", len(request)) + request
        self.reset_after, self.got, self.reset = reset_after, 0, False

    async def readexactly(self, n: int) -> bytes:
        out, self._in = self._in[:n], self._in[n:]
        return out

    async def read(self, n: int) -> bytes:
        return b""  # the requester closed its end after reading

    def write(self, data: bytes) -> None:
        if self.reset:
            raise ConnectionResetError("stream reset")
        self.got += len(data)

    async def drain(self) -> None:
        if self.reset_after is not None and self.got >= self.reset_after:
            self.reset = True
            raise ConnectionResetError("stream reset")

    def close(self) -> None:
        pass


def _server():
    t = transport(Identity.generate())
    t._mine[7] = b"b" * SIZE
    carrier = Libp2pCarrier(None, "/test/bodies")
    carrier._handler = t._serve_body
    return t, carrier


async def _ask(carrier, reset_after: int | None) -> Stream:
    s = Stream(reset_after)
    await carrier.serve_stream(libp2p_peer_id(Identity.generate()), s, s)
    return s


def test_fresh_ids_that_reset_their_streams_do_not_use_up_a_body_for_honest_strangers():
    """Before: 8 fresh ids, each asking twice and resetting after the header, used up the body's
    16 stranger serves and the honest stranger asking next got nothing."""
    t, carrier = _server()

    async def main():
        for _ in range(8):
            rid = libp2p_peer_id(Identity.generate())
            for _ in range(2):
                s = Stream(reset_after=0)
                await carrier.serve_stream(rid, s, s)
        honest = await _ask(carrier, None)
        return honest

    honest = asyncio.run(main())
    assert honest.got == 9 + SIZE  # the header and the whole body
    assert t.counts["serves_refused"] == 0


def test_a_flood_that_resets_mid_write_pulls_at_most_the_cap_in_bytes():
    t, carrier = _server()

    async def main():
        pulled = 0
        for _ in range(200):  # 200 fresh ids, each cut off after half the body
            pulled += (await _ask(carrier, SIZE // 2)).got
        return pulled

    pulled = asyncio.run(main())
    assert pulled <= MAX_STRANGER_SERVES * SIZE + 200 * 9, pulled  # the body's bytes, and a header each
    assert t._serves.charged[7] + 200 * 9 >= pulled and t._serves.reserved[7] == 0
    assert t.counts["serves_refused"] > 150  # once the cap is spent, the rest get nothing


def test_at_most_a_few_strangers_serves_of_a_body_are_in_flight():
    """Before: 16 strangers' serves in flight reserved the whole byte budget (8 ids x 2)."""
    s = Serves()
    held = [s.take(f"sybil{i}", 7, False, SIZE) for i in range(8) for _ in range(2)]
    assert sum(h is not None for h in held) == MAX_STRANGER_INFLIGHT
    assert s.reserved[7] == MAX_STRANGER_INFLIGHT * SIZE < MAX_STRANGER_SERVES * SIZE
    assert s.take("vouched", 7, True, SIZE) is not None  # peers with a history are not held up
    next(h for h in held if h is not None)(SIZE // 2)  # one serve ends ...
    assert s.take("honest", 7, False, SIZE) is not None  # ... and a stranger is served
    s.keep_only(set())
    assert not s.inflight and not s.reserved


class Stalling(Stream):
    """A requester that reads a slice now and then: each ``drain`` takes ``pause`` s, well within
    the per-piece timeout, so only a deadline on the whole reply ends its serve."""

    def __init__(self, pause: float):
        super().__init__(None)
        self.pause = pause

    async def drain(self) -> None:
        await asyncio.sleep(self.pause)  # the attack: a slow reader


def test_strangers_reading_slowly_are_cut_at_the_reply_deadline_and_an_honest_one_is_served_after(monkeypatch):
    """Before: the only limit on a serve was 30 s per piece, so slow readers kept a body's
    stranger serves in flight as long as they liked. The deadline is READ_TIMEOUT_S + size /
    MIN_RATE (made short here: 0.5 s + 2 s, against ~9 s for the slow readers to read it all)."""
    monkeypatch.setattr(carrier_module, "READ_TIMEOUT_S", 0.5)
    monkeypatch.setattr(carrier_module, "MIN_RATE", 1_000_000)
    t, carrier = _server()

    async def main():
        slow = [Stalling(0.3) for _ in range(MAX_STRANGER_INFLIGHT)]
        serves = [asyncio.create_task(carrier.serve_stream(libp2p_peer_id(Identity.generate()), s, s))
                  for s in slow]
        while t._serves.inflight[7] < MAX_STRANGER_INFLIGHT:
            await asyncio.sleep(0)
        refused = await _ask(carrier, None)  # every stranger slot of the body is in flight
        start = time.monotonic()
        await asyncio.wait_for(asyncio.gather(*serves), 5.0)  # old code: ~9 s
        cut_after = time.monotonic() - start
        return slow, refused, cut_after, await _ask(carrier, None)

    slow, refused, cut_after, honest = asyncio.run(main())
    assert refused.got < SIZE and t.counts["serves_refused"] == 1
    assert cut_after < 3.0 and all(s.got < SIZE for s in slow)
    assert honest.got == 9 + SIZE
    assert t._serves.charged[7] == sum(s.got - 9 for s in slow) + SIZE  # charged what went out
