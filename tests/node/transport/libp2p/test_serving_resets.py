"""A large body served over a stream to strangers whose streams reset mid-write
(node/transport/libp2p/serving.py, node/transport/carrier.py ``serve_stream``): what a reset
serve costs is what went out, and the upload to strangers stays bounded."""

from __future__ import annotations

import asyncio
import struct

import msgpack

from node.transport.libp2p.carrier import Libp2pCarrier
from node.transport.libp2p.host import libp2p_peer_id
from node.transport.libp2p.serving import MAX_STRANGER_SERVES
from protocol.identity import Identity
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
