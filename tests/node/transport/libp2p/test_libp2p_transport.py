"""The py-libp2p transport on loopback: real hosts (noise, yamux, gossipsub) in this process.

py-libp2p cannot be imported beside hivemind, so this folder runs in a pytest process of its own
(tests/node/transport/test_libp2p_suite.py starts it; ``pytest tests/libp2p`` runs it directly)."""

from __future__ import annotations

import asyncio
import collections
import time

import msgpack
import pytest

from swarm_node.node.clock import RoundClock
from swarm_node.node.swarm.exchange import SwarmExchange
from swarm_node.node.transport.base import Delivery, TransportError
from swarm_node.node.transport.libp2p.transport import GOSSIP_BODY_MAX, Libp2pTransport, gossip_topics
from swarm_node.node.transport.libp2p.host import Libp2pHost, libp2p_peer_id, publisher_of
from swarm_node.node.transport.libp2p.trio_bridge import BridgeClosed, TrioThread
from swarm_node.protocol.codec import encode
from swarm_node.protocol.identity import Identity
from swarm_node.protocol.messages import Announcement, RolloutBatch, RolloutRecord
from swarm_node.protocol.signing import envelope_to_bytes, sign



from tests.helpers.libp2p_net import LOOPBACK, VOCAB, envelope, exchange, hub_and_two, transport, until  # noqa: F401


def test_the_libp2p_peer_id_is_the_node_key_and_maps_back_to_its_swarm_id():
    ident = Identity.generate()
    pid = libp2p_peer_id(ident)
    assert pid.startswith("12D3KooW")  # an Ed25519 key, inlined in the id
    from libp2p.peer.id import ID

    assert publisher_of(ID.from_base58(pid)) == ident.peer_id
    assert publisher_of(b"not an id") is None
    with pytest.raises(TransportError, match="identity"):
        Libp2pTransport(swarm="t", publisher=ident.peer_id, identity=Identity.generate())


def test_the_trio_bridge_returns_results_raises_errors_and_cancels():
    import trio

    async def main():
        bridge = TrioThread("test")
        await bridge.start()
        cancelled = []

        async def add(a, b):
            await trio.sleep(0.01)
            return a + b

        async def fail():
            raise ValueError("from trio")

        async def forever():
            try:
                await trio.sleep_forever()
            except trio.Cancelled:
                cancelled.append(True)
                raise

        async def back_to_asyncio():
            return await bridge.await_loop(asyncio.sleep, 0.01, "from asyncio")

        assert await bridge.call(add, 2, 3) == 5
        with pytest.raises(ValueError, match="from trio"):
            await bridge.call(fail)
        assert await bridge.call(back_to_asyncio) == "from asyncio"
        task = asyncio.ensure_future(bridge.call(forever))
        await asyncio.sleep(0.1)
        task.cancel()
        await until(lambda: cancelled, 5, "the trio task cancelled")
        await bridge.stop()
        assert not bridge.alive()
        with pytest.raises(BridgeClosed):
            await bridge.call(add, 1, 1)

    asyncio.run(main())


def test_three_nodes_exchange_envelopes_and_heartbeats_through_a_relay_and_large_bodies_by_stream():
    """A and C know only B; B forwards gossip both ways. A body above the gossip limit goes as a
    pointer and is fetched from its publisher over a stream."""
    ia, ib, ic = Identity.generate(), Identity.generate(), Identity.generate()
    clock = RoundClock(10.0)
    r = clock.current()

    async def main():
        (b, eb), (a, ea), (c, ec) = await hub_and_two(ib, ia, ic, clock)
        try:
            await until(lambda: b.host.mesh_peers(gossip_topics("t")[0]) >= 2, 20, "a mesh at B")
            await until(lambda: a.host.mesh_peers(gossip_topics("t")[0]) >= 1 and
                        c.host.mesh_peers(gossip_topics("t")[0]) >= 1, 20, "A and C in B's mesh")
            await a.publish(r, envelope(ia, r), 60)
            await until(lambda: ec.stats.envelopes_in == 1 and eb.stats.envelopes_in == 1, 20, "A's envelope at B and C")
            big = envelope(ia, r - 1, seq=2, records=128, length=1000)
            assert len(big) > GOSSIP_BODY_MAX
            await a.publish(r - 1, big, 60)
            await until(lambda: ec.stats.envelopes_in == 2, 30, "A's large envelope fetched by C")
            assert c.counts["fetched"] == 1 and b.counts["fetched"] == 1, (b.counts, c.counts, b.rejected)
            ann = Announcement(sender=ic.peer_id, round=r, policy_version=1, model_fingerprint="m",
                               tokenizer_fingerprint="tok", created_at=time.time(), addrs=())
            await c.announce(envelope_to_bytes(sign(encode(ann), ic, 5)), 30)

            async def heard():
                for d in await a.poll_announcements():
                    ea.admit_announcement(d)
                return ic.peer_id in ea.peers

            await until(heard, 20, "C's heartbeat at A")
            assert not ec.stats.rejected and not c.rejected, (ec.stats.rejected, c.rejected)
        finally:
            await ea.close(), await ec.close(), await eb.close()

    asyncio.run(main())


def test_hostile_gossip_is_refused_at_the_first_honest_node_and_never_reaches_the_next():
    """X, a raw libp2p host with its own key, gossips to B only: junk, another's envelope,
    a tampered one, an honest envelope re-published on another round, a pointer declaring 5 MiB
    and one aimed at someone else's address. B refuses each (counted under the node's reasons) before
    forwarding; C, behind B, receives nothing but the honest envelope."""
    ia, ib, ic, ix, other = (Identity.generate() for _ in range(5))
    clock = RoundClock(10.0)
    r = clock.current()
    topic = gossip_topics("t")[0]

    async def main():
        (b, eb), (a, ea), (c, ec) = await hub_and_two(ib, ia, ic, clock)
        x = Libp2pHost(ix, LOOPBACK, b.host.addrs, target_peers=1)
        await x.start(20)
        try:
            await x.bridge.call(x.connect_bootstrap)
            await x.subscribe(topic, lambda *a: None, lambda *a: True)
            await until(lambda: b.host.mesh_peers(topic) >= 3 and x.mesh_peers(topic) >= 1, 20, "X in B's mesh")
            honest = envelope(ia, r)
            await a.publish(r, honest, 60)
            await until(lambda: ec.stats.envelopes_in == 1, 20, "the honest envelope at C")
            tampered = bytearray(envelope(ix, r, seq=3))
            tampered[-70] ^= 1
            # Two a round: a publisher's third message for one round is not worth a check (budget).
            hostile = [
                b"\xc1 junk",  # not msgpack
                msgpack.packb([r, b"not an envelope"]),
                msgpack.packb([r, envelope(other, r)]),  # signed by another key than X's
                msgpack.packb([r - 1, bytes(tampered)]),
                msgpack.packb([r - 1, honest]),  # A's envelope replayed on another round
                msgpack.packb([r - 2, 5 << 20, b"h" * 32, x.addrs[0]]),  # a pointer declaring 5 MiB
                msgpack.packb([r - 2, 1 << 20, b"h" * 32, a.host.addrs[0]]),  # aimed at A's address
            ]
            for m in hostile:
                await x.bridge.call(x.pubsub.publish, topic, m)

            def refused():
                return sum(eb.stats.rejected.values()) + sum(b.rejected.values()) >= len(hostile)

            await until(refused, 20, "B's refusals")
            rej = dict(eb.stats.rejected + b.rejected)
            # A's envelope from X's key is X's claim to A's work: sender_mismatch, as the pointer
            # naming A's address is.
            assert rej == {"malformed_envelope": 2, "sender_mismatch": 3, "bad_signature": 1, "oversized": 1}, rej
            # A verbatim copy of A's own gossip message is one message id (origin and data hashed): gossipsub
            # drops it as seen. Once that memory has passed, the validator refuses it as a replay.
            assert not eb.gate(Delivery(r, ia.peer_id, honest))
            await until(lambda: eb.stats.rejected.get("replay") == 1, 5, "the replay counted")
            # X gets A's next message out first, byte for byte, under its own origin (a faster relay
            # re-wrapping what it saw). B refuses it, and pubsub keeps that verdict for minutes under
            # the message's id: the id must name the origin, or A's own copy would be refused with it.
            early = envelope(ia, r - 3, seq=8)
            await x.bridge.call(x.pubsub.publish, topic, msgpack.packb([r - 3, early]))
            await until(lambda: b.rejected.get("sender_mismatch", 0) + eb.stats.rejected.get("sender_mismatch", 0) == 4,
                        20, "X's re-wrap refused")
            await a.publish(r - 3, early, 60)
            await until(lambda: ec.stats.envelopes_in == 2, 20, "A's own copy at C after X's re-wrap")
            # Give any forwarded message time to arrive (B forwards within milliseconds), then look at C.
            marker = envelope(ia, r - 2, seq=9)
            await a.publish(r - 2, marker, 60)
            await until(lambda: ec.stats.envelopes_in == 3, 20, "a later honest envelope at C")
            assert not ec.stats.rejected and not c.rejected, (ec.stats.rejected, c.rejected)
            assert ec.stats.envelopes_in == 3
        finally:
            await x.close()
            await ea.close(), await ec.close(), await eb.close()

    asyncio.run(main())


def test_no_bootstrap_peer_answering_is_a_clear_error():
    ident = Identity.generate()

    async def main():
        dead = f"/ip4/127.0.0.1/tcp/9/p2p/{libp2p_peer_id(Identity.generate())}"
        t = transport(ident, [dead])
        with pytest.raises(TransportError, match="none of the bootstrap peers"):
            await t.start()
        await t.close()

    asyncio.run(main())


def test_nodes_that_know_only_a_bootstrap_host_find_each_other_by_peer_exchange():
    """The bootstrap joins no topic (as `swarm-node bootstrap --transport libp2p`): gossip between
    A and C needs them connected, which peer exchange does."""
    ia, ic = Identity.generate(), Identity.generate()
    clock = RoundClock(10.0)
    r = clock.current()

    async def main():
        boot = Libp2pHost(Identity.generate(), LOOPBACK, [], px_interval=0.5)
        await boot.start(20)
        a, c = transport(ia, boot.addrs), transport(ic, boot.addrs)
        ea, ec = exchange(a, ia, clock), exchange(c, ic, clock)
        await ea.start(), await ec.start()
        try:
            await until(lambda: len(a.host.connected()) >= 2 and c.host.mesh_peers(gossip_topics("t")[0]) >= 1, 30,
                        "A and C connected through peer exchange, in each other's mesh")
            await a.publish(r, envelope(ia, r), 60)
            await until(lambda: ec.stats.envelopes_in == 1, 20, "A's envelope at C")
        finally:
            await ea.close(), await ec.close(), await boot.close()

    asyncio.run(main())


def test_a_node_sees_the_swarm_names_of_peers_that_joined_another_swarm():
    """Through the same bootstrap, a node of swarm "u" connects to one of swarm "t" (peer exchange
    knows no swarm): each sees the other's rollout topic, so a node that hears no peer of its own
    swarm can name the one its peers are in (node/run/swarm_watch.py)."""
    ia, ib = Identity.generate(), Identity.generate()

    async def main():
        boot = Libp2pHost(Identity.generate(), LOOPBACK, [], px_interval=0.5)
        await boot.start(20)
        a = transport(ia, boot.addrs)
        b = Libp2pTransport(swarm="u", publisher=ib.peer_id, identity=ib, listen=LOOPBACK, bootstrap=boot.addrs,
                            join_retries=0, startup_timeout=20)
        await a.start(), await b.start()
        try:
            await until(lambda: a.info().get("other_swarms") == ["u"] and b.info().get("other_swarms") == ["t"], 30,
                        "each to see the other's swarm name")
        finally:
            await a.close(), await b.close(), await boot.close()

    asyncio.run(main())


def test_a_closed_host_hangs_up_on_its_peers_so_their_next_request_fails_at_once():
    """A host that dialled a peer and then closed used to leave that connection open: the peer's
    next stream to it waited for py-libp2p's 10 s negotiation timeout (a killed broadcast relay cost
    its children 10-20 s a request). Closing now closes the connections first."""

    async def main() -> str:
        a = Libp2pHost(Identity.generate(), LOOPBACK, [])
        b = Libp2pHost(Identity.generate(), LOOPBACK, [])
        await a.start()
        await b.start()
        try:
            async def echo(stream):
                stream.write(await stream.read(10))
                await stream.drain()

            await b.set_stream_handler("/echo/1", echo)
            s = await a.open_stream(b.addrs[0], "/echo/1", 10)  # a dials b: the direction that stayed open
            s.write(b"x")
            await s.drain()
            assert await s.read(10) == b"x"
            s.close()
            await a.close()
            # 8 s: under py-libp2p's 10 s negotiation timeout, so a connection left open shows as
            # our own deadline passing (TooSlowError), a closed one as a refused dial.
            with pytest.raises(ConnectionError) as e:
                await b.open_stream(a.addrs[0], "/echo/1", 8)
            return str(e.value)
        finally:
            await b.close()

    assert "TooSlowError" not in asyncio.run(main())
