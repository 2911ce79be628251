"""The weight broadcast through a real Mosquitto: the same manifests, chunks and relay tree as over
peer streams, a lying relay and a relay that drops off the broker mid-transfer routed around, a
follower on a link slower than its source publishes still applying versions, and the weights
directory as signed retained messages that no other account can forge."""

from __future__ import annotations

import asyncio
import hashlib
import random
import time

import aiomqtt
import pytest

from swarm_node.node.transport.ratelimit import TokenBucket
from swarm_node.node.transport.carrier import CarrierError
from swarm_node.node.transport.mqtt.carrier import MqttCarrier
from swarm_node.node.transport.mqtt.directory import MqttWeightDirectory
from swarm_node.node.broadcast.peer import BroadcastPeer
from swarm_node.node.broadcast.store import ChunkStore
from swarm_node.protocol.identity import Identity
from swarm_node.protocol.manifest import build_manifest, decode_manifest, encode_manifest
from swarm_node.protocol.records import sign_record
from swarm_node.node.transport.mqtt.parts import split
from tests.helpers.mqtt_fixtures import broker, certs, idents  # noqa: F401 - fixtures
from tests.helpers.broadcast_net import outpace
from tests.helpers.mqtt_fixtures import transport, until

pytestmark = pytest.mark.broker

MF = dict(model_fingerprint="mf", tokenizer_fingerprint="tf", format="safetensors-full")
META = dict(step=1, **MF)


class LyingMqttCarrier(MqttCarrier):
    """Serves every chunk with one byte flipped."""

    async def paced(self, payload, write, remote="", low=False):
        if len(payload) > 1000:
            payload = bytes([payload[0] ^ 1]) + bytes(payload[1:])
        await super().paced(payload, write, remote, low)


async def network(broker, n, upload=None, liar=None, swarm="b"):
    ids = [Identity.generate() for _ in range(n + 1)]
    directory: dict[str, str] = {}
    got = {i.peer_id: [] for i in ids}
    peers, transports = [], []
    for k, ident in enumerate(ids):
        t = transport(broker, ident, 0, "anonymous", swarm=swarm)
        await t.start()
        transports.append(t)
        carrier = (LyingMqttCarrier if k == liar else MqttCarrier)(t, TokenBucket(upload) if upload else None)

        async def on_version(m, data, who=ident.peer_id):
            got[who].append((m.version, hashlib.sha256(data).digest()))

        peers.append(BroadcastPeer(ident, carrier, swarm=swarm, directory=directory,
                                   follow=None if k == 0 else ids[0].peer_id, on_version=on_version,
                                   request_timeout_s=10.0))
    for p in peers:
        await p.start()
        directory[p.me] = p.carrier.address
    return peers, transports, got


async def _all_applied(got, peers) -> bool:
    return all(got[p.me] for p in peers)


async def close_all(peers, transports):
    for p in peers:
        await p.close()
    for t in transports:
        await t.close()


def test_a_chain_through_the_broker_with_a_lying_relay_delivers_the_exact_bytes(broker):
    async def go():
        peers, ts, got = await network(broker, 3, liar=1)
        data = random.Random(1).randbytes(3_000_000)
        try:
            await peers[0].publish(data, version=1, relays=[p.me for p in peers[1:]], chunk_size=256 * 1024, **META)
            await until(lambda: _all_applied(got, peers[1:]), 60, "every follower to apply version 1")
            return data, got, peers
        finally:
            await close_all(peers, ts)

    data, got, peers = asyncio.run(go())
    want = [(1, hashlib.sha256(data).digest())]
    assert all(got[p.me] == want for p in peers[1:])
    assert set(peers[2].stats.bad_chunks) == {peers[1].me}  # the liar's child noticed and went around it
    assert peers[3].stats.bad_chunks == {}


def test_a_relay_that_drops_off_the_broker_mid_transfer_is_routed_around(broker):
    async def go():
        peers, ts, got = await network(broker, 3, upload=2_000_000, swarm="b2")
        data = random.Random(2).randbytes(4_000_000)
        try:
            await peers[0].publish(data, version=1, relays=[p.me for p in peers[1:]], chunk_size=256 * 1024, **META)
            relay = peers[1]

            async def half():
                return sum(len(c) for t in relay.held.values() for c in t.chunks.values()) >= 1_500_000

            await until(half, 60, "the first relay to hold 1.5 MB")
            await ts[1].close()  # its connection is gone: its inbox is read by nobody
            await until(lambda: _all_applied(got, peers[2:]), 90, "the others to apply version 1 without it")
            return data, got, peers
        finally:
            await close_all(peers, ts)

    data, got, peers = asyncio.run(go())
    assert all(got[p.me] == [(1, hashlib.sha256(data).digest())] for p in peers[2:])
    assert peers[2].stats.fallbacks > 0


def test_a_reply_announced_over_the_limit_is_not_read(broker):
    async def go():
        a, b = Identity.generate(), Identity.generate()
        ta, tb = transport(broker, a, 0, "anonymous", swarm="b3"), transport(broker, b, 0, "anonymous", swarm="b3")
        await ta.start(), await tb.start()
        ca, cb = MqttCarrier(ta), MqttCarrier(tb)

        asked = []

        async def handler(remote, request):
            asked.append((remote, request))
            return 0, b"x" * 200_000

        await ca.start(handler), await cb.start(handler)
        try:
            status, body = await cb.call(a.peer_id, b"hi", max_reply=300_000, timeout=5)
            assert status == 0 and body == b"x" * 200_000  # several pieces under the 64 KiB packet limit
            offer = random.Random(4).randbytes(300_000)  # a big manifest offer: a request in 5 parts
            assert await cb.call(a.peer_id, offer, max_reply=300_000, timeout=5) == (0, b"x" * 200_000)
            assert asked == [(b.peer_id, b"hi"), (b.peer_id, offer)]
            with pytest.raises(CarrierError, match="over 1000"):
                await cb.call(a.peer_id, b"hi", max_reply=1000, timeout=5)
            with pytest.raises(CarrierError, match="no reply"):
                await cb.call(Identity.generate().peer_id, b"hi", max_reply=1000, timeout=1)  # nobody reads it
        finally:
            await ca.close(), await cb.close(), await ta.close(), await tb.close()

    asyncio.run(go())


async def _refused(d, n):
    return d.refused >= n


def test_the_directory_is_signed_retained_and_unforgeable(broker):
    src, fol, thief = Identity.generate(), Identity.generate(), Identity.generate()

    async def go():
        ts = transport(broker, src, 0, "anonymous", swarm="d")
        await ts.start()
        ds = MqttWeightDirectory(ts, src, src.peer_id)
        await ds.start()
        # A manifest of 6 MB in 1 KiB chunks: 6000 hashes, about 200 kB, retained in parts.
        M = build_manifest(random.Random(3).randbytes(6_000_000), src, swarm="d", version=5, step=5,
                           chunk_size=1024, **MF)
        assert await ds.announce_version(M, src.peer_id)
        # A follower that joins later finds the retained pointer and manifest at once: it can start
        # without the source answering.
        tf = transport(broker, fol, 0, "anonymous", swarm="d")
        await tf.start()
        df = MqttWeightDirectory(tf, fol, src.peer_id)
        await df.start()
        follower = BroadcastPeer(fol, MqttCarrier(tf), swarm="d", directory={}, follow=src.peer_id)
        try:
            async def pointer():
                return await df.read_pointer()

            async def manifest():
                return await df.read_manifest(M.digest)

            p = await until(pointer, 10, "the retained pointer")
            assert (p.version, p.digest, p.address) == (5, M.digest, src.peer_id)
            assert decode_manifest(await until(manifest, 10, "the retained manifest")).digest == M.digest
            assert await df.announce_follower(fol.peer_id, 5)

            async def followers():
                return await ds.read_followers()

            assert await until(followers, 10, "the follower's record") == {fol.peer_id: (fol.peer_id, 5)}

            # A raw client on a broker with no ACL: a pointer signed by the thief on the source's
            # topic, one of the source's moved from another swarm's topic, garbage, a manifest the
            # thief signed retained on the source's manifest topic, and a follower record of the
            # thief's under `fol`'s topic.
            refused, refused_src = df.refused, ds.refused
            async with aiomqtt.Client("127.0.0.1", broker.ports["anonymous"],
                                      protocol=aiomqtt.ProtocolVersion.V5) as raw:
                top = f"swarm-node/d/weights/{src.peer_id}"
                forged = sign_record(thief, top, {"v": 99, "d": "00" * 32, "addr": thief.peer_id}, time.time() + 60)
                moved = sign_record(src, "swarm-node/other/weights/" + src.peer_id,
                                    {"v": 98, "d": "00" * 32, "addr": src.peer_id}, time.time() + 60)
                for payload in (forged, moved, b"\x93garbage"):
                    await raw.publish(top, payload, qos=1)
                theirs = build_manifest(b"x" * 5000, thief, swarm="d", version=99, step=1, chunk_size=1024, **MF)
                for i, part in enumerate(split(encode_manifest(theirs), 60000)):
                    await raw.publish(f"{top}/manifest/{i}", part, qos=1, retain=True)
                follows = f"swarm-node/d/follows/{fol.peer_id}/{src.peer_id}"
                await raw.publish(follows, sign_record(thief, follows, {"addr": thief.peer_id, "applied": 1},
                                                       time.time() + 60), qos=1)
                # and one a follower signed itself, naming another's inbox as its address (it would
                # send the source's relay traffic there)
                other = Identity.generate()
                theirs_too = f"swarm-node/d/follows/{other.peer_id}/{src.peer_id}"
                await raw.publish(theirs_too, sign_record(other, theirs_too, {"addr": fol.peer_id, "applied": 1},
                                                          time.time() + 60), qos=1)

            async def thief_manifest_arrived():
                body = await df.read_manifest(M.digest)
                return body is not None and decode_manifest(body).source == thief.peer_id

            await until(thief_manifest_arrived, 10, "the thief's retained manifest")
            # None of the records is taken ...
            assert df.refused >= refused + 3 and (await df.read_pointer()).version == 5
            # the source saw the 3 pointer forgeries and refused both follower records
            await until(lambda: _refused(ds, refused_src + 5), 10, "both follower records refused")
            assert await ds.read_followers() == {fol.peer_id: (fol.peer_id, 5)}
            # ... and the thief's manifest, though it replaced the source's on the broker, is not
            # taken by the follower: it is not the one the pointer names, nor the source's.
            assert not follower.take_manifest(await df.read_manifest(M.digest), M.digest)
            assert follower.take_manifest(encode_manifest(M), M.digest)  # the real one is
        finally:
            await follower.close()
            await ts.close(), await tf.close()

    asyncio.run(go())


def test_a_follower_on_a_link_slower_than_the_publishing_applies_versions_through_the_broker(broker, tmp_path):
    """Issue 28's worker: each new version cancelled the one in flight, so it applied none while
    its learner published faster than its link, and abandoned chunks piled up on disk."""
    size, chunk, versions = 1024 * 1024, 64 * 1024, 12

    async def go():
        ids = [Identity.generate() for _ in range(2)]
        ts = [transport(broker, i, 0, "anonymous", swarm="b-slow") for i in ids]
        for t in ts:
            await t.start()
        upload = TokenBucket(1_000_000)  # the source's: a version in about a second
        directory: dict[str, str] = {}
        src = BroadcastPeer(ids[0], MqttCarrier(ts[0], upload), swarm="b-slow", directory=directory)
        follower = BroadcastPeer(ids[1], MqttCarrier(ts[1]), swarm="b-slow", directory=directory,
                                 follow=ids[0].peer_id, store=ChunkStore(tmp_path), max_staleness=2,
                                 request_timeout_s=10.0)
        for p in (src, follower):
            await p.start()
            directory[p.me] = p.carrier.address
        try:
            return await outpace(src, follower, lambda: upload.taken, tmp_path / "chunks", versions=versions,
                                 size=size, chunk_size=chunk, per_publish=0.4)
        finally:
            await close_all([src, follower], ts)

    applied, lags, peak = asyncio.run(asyncio.wait_for(go(), 120))
    print(f"applied {applied} of {versions} while publishing, peak chunk bytes on disk {peak / size:.2f} versions")
    assert len(applied) >= 2 and all(lag <= 2 for lag in lags)  # about one version in 2.5
    assert peak <= 2 * size + 4 * chunk  # the last applied, the one in flight, the window's writes
