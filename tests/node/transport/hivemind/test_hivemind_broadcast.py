"""The broadcast over real hivemind p2p daemons on loopback: a chain that delivers, a relay that
lies over a real stream, a relay whose daemon dies mid-transfer, and replies out of bounds."""

from __future__ import annotations

import asyncio
import hashlib
import random

import pytest

from swarm_node.node.transport.ratelimit import TokenBucket
from swarm_node.node.transport.carrier import CarrierError
from swarm_node.node.transport.hivemind.carrier import HivemindCarrier
from swarm_node.node.broadcast.peer import BroadcastPeer
from swarm_node.node.broadcast.wire import OK
from swarm_node.protocol.identity import Identity
from tests.helpers.wait import wait_for

pytestmark = pytest.mark.daemon

META = dict(step=1, model_fingerprint="mf", tokenizer_fingerprint="tf", format="safetensors-full")


class LyingHivemindCarrier(HivemindCarrier):
    """Serves every chunk with one byte flipped (what it keeps and verifies itself is fine)."""

    async def paced(self, payload, write, remote="", low=False):
        if len(payload) > 1000:
            payload = bytes([payload[0] ^ 1]) + bytes(payload[1:])
        await super().paced(payload, write, remote, low)


async def network(n: int, upload: float | None = None, liar: int | None = None):
    ids = [Identity.generate() for _ in range(n + 1)]
    directory: dict[str, str] = {}
    got: dict[str, list] = {i.peer_id: [] for i in ids}
    peers = []
    for k, ident in enumerate(ids):
        cls = LyingHivemindCarrier if k == liar else HivemindCarrier
        carrier = await cls.create("t", TokenBucket(upload) if upload else None)

        async def on_version(m, data, who=ident.peer_id):
            got[who].append((m.version, hashlib.sha256(data).digest()))

        peers.append(BroadcastPeer(ident, carrier, swarm="t", directory=directory,
                                   follow=None if k == 0 else ids[0].peer_id, on_version=on_version,
                                   request_timeout_s=10.0))
    for p in peers:
        await p.start()
        directory[p.me] = p.carrier.address
    return peers, got


async def close_all(peers):
    for p in peers:
        await p.close()


def test_a_chain_over_hivemind_streams_with_a_lying_relay_delivers_the_exact_bytes():
    async def go():
        peers, got = await network(3, liar=1)  # source -> f0 (lies) -> f1 -> f2
        data = random.Random(1).randbytes(3_000_000)
        try:
            await peers[0].publish(data, version=1, relays=[p.me for p in peers[1:]], chunk_size=256 * 1024, **META)
            await wait_for(lambda: all(got[p.me] for p in peers[1:]))
            return data, got, peers
        finally:
            await close_all(peers)

    data, got, peers = asyncio.run(go())
    want = [(1, hashlib.sha256(data).digest())]
    assert all(got[p.me] == want for p in peers[1:])
    f1 = peers[2]  # the liar's child: it noticed, dropped it and took the chunks from the source
    assert set(f1.stats.bad_chunks) == {peers[1].me} and f1.stats.fallbacks == 12
    assert peers[3].stats.bad_chunks == {}  # f2's parent is f1, honest


def test_a_relay_whose_daemon_dies_mid_transfer_is_routed_around():
    async def go():
        peers, got = await network(3, upload=2_000_000)  # 4 MB at 2 MB/s: 2 s a copy
        data = random.Random(2).randbytes(4_000_000)
        try:
            await peers[0].publish(data, version=1, relays=[p.me for p in peers[1:]], chunk_size=256 * 1024, **META)
            relay = peers[1]
            await wait_for(lambda: sum(len(c) for t in relay.held.values() for c in t.chunks.values()) >= 1_500_000)
            await relay.carrier.p2p.shutdown()  # its p2pd is gone: streams cut, dials refused
            await wait_for(lambda: got[peers[2].me] and got[peers[3].me])
            return data, got, peers
        finally:
            await close_all(peers)

    data, got, peers = asyncio.run(go())
    want = [(1, hashlib.sha256(data).digest())]
    assert got[peers[2].me] == want and got[peers[3].me] == want
    assert peers[2].stats.failed_requests[peers[1].me] >= 1 and peers[2].stats.fallbacks > 0


def test_replies_over_the_limit_and_garbage_requests_are_refused():
    async def go():
        a, b = await HivemindCarrier.create("t"), await HivemindCarrier.create("t")
        peer = BroadcastPeer(Identity.generate(), a, swarm="t", directory={})
        await peer.start()
        await b.start(lambda remote, req: asyncio.sleep(0, (OK, b"")))
        try:
            replies = [await b.call(a.address, req, max_reply=1024, timeout=5)
                       for req in (b"\xc1garbage", b"\x93\xa1c\xc4\x01x\x05", b"\x92\xa1o\xc4\x03abc")]
            with pytest.raises(CarrierError):
                await b.call("not-a-multiaddr", b"x", max_reply=10, timeout=5)
            return replies
        finally:
            await peer.close()
            await b.close()

    replies = asyncio.run(go())
    assert [s for s, _ in replies] == [3, 2, 3]  # bad request, unknown version, a manifest that is not one


def test_a_peer_trickling_its_reply_is_given_up_on():
    """A reply announced at full size but sent a few bytes at a time: the per-piece timeout alone
    would wait forever; the whole-reply deadline (MIN_RATE) ends it."""
    import swarm_node.node.transport.carrier as hc
    from swarm_node.node.transport.carrier import HEADER

    async def go():
        a, b = await HivemindCarrier.create("t"), await HivemindCarrier.create("t")

        async def trickle(info, reader, writer):
            await reader.readexactly(4 + 1)
            writer.write(HEADER.pack(OK, 1_000_000))
            try:
                for _ in range(200):
                    writer.write(b"x")
                    await writer.drain()
                    await asyncio.sleep(0.05)
            except ConnectionError:
                pass  # the requester gave up: what this test waits for

        await a.p2p.add_binary_stream_handler("/swarm-node/t/weights", trickle)
        a.address = f"{(await a.p2p.get_visible_maddrs())[0]}"
        await b.start(lambda remote, req: asyncio.sleep(0, (OK, b"")))
        old = hc.MIN_RATE
        hc.MIN_RATE = 1_000_000  # 1 MB/s: this 1 MB reply must be done in 1 s + the timeout
        try:
            loop = asyncio.get_running_loop()
            t0 = loop.time()
            with pytest.raises(CarrierError, match="slower than"):
                await b.call(a.address, b"x", max_reply=2_000_000, timeout=1.0)
            return loop.time() - t0
        finally:
            hc.MIN_RATE = old
            await a.close()
            await b.close()

    took = asyncio.run(go())
    assert took < 5  # not the 10 s the trickle would take, nor forever


def test_a_requester_that_never_closes_its_streams_holds_no_slot_after_each_reply():
    """The server waits for the requester to close before closing (p2pd drops reply tails
    otherwise), but gives the request slot back once the reply is written: 3 x STREAMS_PER_REMOTE
    requests left open one after another are all answered."""
    from swarm_node.node.transport.carrier import HEADER, STREAMS_PER_REMOTE, U32
    from swarm_node.node.transport.hivemind.carrier import _handler_name, _peer_of

    async def go():
        a, b = await HivemindCarrier.create("t"), await HivemindCarrier.create("t")
        await a.start(lambda remote, req: asyncio.sleep(0, (OK, b"pong")))
        peer, maddr = _peer_of(a.address)
        await b.p2p._client.connect(peer, [maddr])
        writers, answered = [], 0
        try:
            for _ in range(3 * STREAMS_PER_REMOTE):
                _, reader, writer = await b.p2p.call_binary_stream_handler(peer, _handler_name("t"))
                writer.write(U32.pack(4) + b"ping")
                await writer.drain()
                status, size = HEADER.unpack(await asyncio.wait_for(reader.readexactly(HEADER.size), 10))
                answered += status == OK and await reader.readexactly(size) == b"pong"
                writers.append(writer)  # left open
            return answered, a.refused_streams
        finally:
            for w in writers:
                w.close()
            await a.close()
            await b.close()

    answered, refused = asyncio.run(go())
    assert answered == 48 and refused == 0
