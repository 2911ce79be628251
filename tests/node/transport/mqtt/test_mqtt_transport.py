"""The MQTT transport against a real Mosquitto: delivery, splitting, late joiners, logins, TLS,
ACLs, and what a hostile client writing into the broker can (not) do to an honest node."""

from __future__ import annotations

import asyncio
import time

import aiomqtt
import pytest

from tests.helpers.mqtt_fixtures import PART_LIMIT, broker, broker_for, certs, idents  # noqa: F401 - fixtures
from swarm_node.node.clock import RoundClock
from swarm_node.node.swarm.exchange import SwarmExchange
from swarm_node.node.transport.base import TransportError
from swarm_node.node.transport.mqtt.url import parse_broker_url, resolve_password
from swarm_node.node.transport.mqtt.transport import MqttTransport
from swarm_node.node.transport.mqtt.parts import HEADER_SIZE, split
from swarm_node.protocol.codec import encode
from swarm_node.protocol.identity import Identity
from swarm_node.protocol.messages import RolloutBatch, RolloutRecord
from swarm_node.protocol.signing import envelope_to_bytes, sign

from tests.helpers.mqtt_fixtures import collect, transport, until

pytestmark = pytest.mark.broker


def test_envelopes_and_heartbeats_reach_peers_split_under_the_broker_limit(broker, idents, certs):
    async def main():
        a, b = transport(broker, idents[0], 0, "tls", ca_file=str(certs.ca)), transport(broker, idents[1], 1)
        await a.start(), await b.start()
        try:
            assert a.link.max_packet == PART_LIMIT  # the broker's CONNACK said so
            assert a.info()["found_via"] == "broker"  # MQTT nodes meet at the broker, never through cached peers
            big = bytes(range(256)) * 4096  # 1 MiB: 17 parts under a 64 KiB packet limit
            await a.publish(7, big, 60)
            await a.publish(8, b"small", 60)
            await a.announce(b"heartbeat", 60)
            got = await collect(b, [7, 8], 2)
            assert sorted((d.round, d.publisher, d.data) for d in got) == [
                (7, idents[0].peer_id, big), (8, idents[0].peer_id, b"small")]
            assert [(d.publisher, d.data) for d in await b.poll_announcements()] == [(idents[0].peer_id, b"heartbeat")]
            assert await b.poll([7, 8]) == []  # new-only
            assert await a.poll([7, 8]) == []  # never its own
            assert a.counts["published"] == 2 and a.link.counts["sent"] >= len(split(big, PART_LIMIT - 512)) + 1
        finally:
            await a.close(), await b.close()

    asyncio.run(main())


def test_a_node_that_joins_late_finds_the_window_and_the_heartbeats(broker, idents):
    async def main():
        a = transport(broker, idents[0], 0)
        await a.start()
        await a.publish(3, b"early" * 30000, 60)
        await a.announce(b"hb-a", 60)
        await a.close()  # gone before the other even connects
        b = transport(broker, idents[2], 2)
        await b.start()
        try:
            got = await collect(b, [3], 1)
            assert got[0].data == b"early" * 30000
            hb = await until(b.poll_announcements, what="retained heartbeat")
            assert [(d.publisher, d.data) for d in hb] == [(idents[0].peer_id, b"hb-a")]
        finally:
            await b.close()

    asyncio.run(main())


def test_wrong_password_wrong_ca_plain_port_and_no_broker_each_say_what_to_check(broker, idents, certs, tmp_path):
    async def fails(t, *words):
        with pytest.raises(TransportError) as e:
            await t.start()
        for w in words:
            assert w in str(e.value), str(e.value)
        await t.close()
        return str(e.value)

    async def main():
        msg = await fails(transport(broker, idents[0], 0, password="not-it"), "refused the login", idents[0].peer_id,
                          "password")
        assert "not-it" not in msg  # the password is never echoed
        await fails(transport(broker, idents[0], 0, "tls", ca_file=str(certs.server_cert)),
                    "did not verify", str(certs.server_cert))
        other = __import__("tests.helpers.tls_certs", fromlist=["make_certs"]).make_certs(tmp_path / "other", "another CA")
        await fails(transport(broker, idents[0], 0, "tls", ca_file=str(other.ca)), "did not verify")
        s = parse_broker_url(broker.url("password", idents[0].peer_id).replace("mqtt://", "mqtts://"),
                             password="pw-0", ca_file=str(certs.ca))
        await fails(MqttTransport(swarm="s", publisher=idents[0].peer_id, broker=s, join_retries=0), "plain MQTT?")
        s = parse_broker_url(broker.url("tls", idents[0].peer_id).replace("mqtts://", "mqtt://"), password="pw-0")
        await fails(MqttTransport(swarm="s", publisher=idents[0].peer_id, broker=s, join_retries=0,
                                  connect_timeout=2.0), "then use mqtts://")
        s = parse_broker_url("mqtt://127.0.0.1:1")
        await fails(MqttTransport(swarm="s", publisher=idents[0].peer_id, broker=s, join_retries=1,
                                  join_backoff=0.05), "cannot reach the broker at mqtt://127.0.0.1:1")

    asyncio.run(main())


def test_password_comes_from_a_file_or_the_environment_never_the_url(tmp_path):
    f = tmp_path / "pw"
    f.write_text("s3cret\n")
    assert resolve_password(str(f), env={}) == "s3cret"
    assert resolve_password("", env={"SWARM_NODE_MQTT_PASSWORD": "from-env"}) == "from-env"
    assert resolve_password("", env={}) is None
    with pytest.raises(TransportError, match="password file"):
        resolve_password(str(tmp_path / "missing"), env={})
    with pytest.raises(ValueError, match="no password in it"):
        parse_broker_url("mqtts://user:s3cret@host")
    s = parse_broker_url("mqtts://user@host", password="s3cret")
    assert s.port == 8883 and s.tls and "s3cret" not in repr(s) and "s3cret" not in s.url
    assert parse_broker_url("mqtt://h").port == 1883
    for bad in ("http://h", "mqtt://", "mqtt://h/path", "mqtt://h:99999"):
        with pytest.raises(ValueError):
            parse_broker_url(bad)


def test_the_acl_refuses_a_node_writing_under_another_nodes_id(broker, idents):
    async def main():
        honest, hostile = transport(broker, idents[0], 0), transport(broker, idents[1], 1)
        await honest.start(), await hostile.start()
        try:
            for topic in (f"swarm-node/s/rollouts/{idents[0].peer_id}/5/0", f"swarm-node/s/peers/{idents[0].peer_id}"):
                with pytest.raises(PermissionError, match="refused a publish"):
                    await hostile.link.publish(topic, b"forged", qos=1, retain=True)
            await hostile.publish(5, b"its own", 60)  # under its own id it may
            got = await collect(honest, [5], 1)
            assert [(d.publisher, d.data) for d in got] == [(idents[1].peer_id, b"its own")]
        finally:
            await honest.close(), await hostile.close()

    asyncio.run(main())


def test_an_account_the_acl_lets_write_nowhere_is_told_at_join(tmp_path, idents, certs):
    m = broker_for(tmp_path / "b", idents, certs, anonymous=False)
    m.acl = (f"user {idents[0].peer_id}\ntopic read swarm-node/#\n"  # reads, never writes
             f"user {idents[1].peer_id}\ntopic write swarm-node/#\n")  # writes, never reads
    with m:
        async def main():
            t = transport(m, idents[0], 0)
            with pytest.raises(TransportError, match="refused a publish"):
                await t.start()
            await t.close()
            t = transport(m, idents[1], 1)
            with pytest.raises(TransportError, match="did not deliver this node's own probe"):
                await t.start()
            await t.close()

        asyncio.run(main())


def test_a_client_certificate_the_broker_requires(tmp_path, idents, certs):
    with broker_for(tmp_path / "b", idents, certs, anonymous=False, require_client_cert=True) as m:
        async def main():
            t = transport(m, idents[0], 0, "tls", ca_file=str(certs.ca))
            with pytest.raises(TransportError):
                await t.start()
            await t.close()
            t = transport(m, idents[0], 0, "tls", ca_file=str(certs.ca), cert_file=str(certs.client_cert),
                          key_file=str(certs.client_key))
            await t.start()
            assert t.link.connected.is_set()
            await t.close()

        asyncio.run(main())


# -- hostile input over a broker without an ACL (the anonymous listener) ---------------------------

VOCAB = 50


def _exchange(t: MqttTransport, ident: Identity, clock: RoundClock) -> SwarmExchange:
    return SwarmExchange(t, ident, clock, tokenizer_fingerprint="tok", model_fingerprint="m", vocab_size=VOCAB,
                         decode_text=lambda ids: "".join(chr(97 + i % 26) for i in ids), poll_seconds=0.05)


def _envelope(ident: Identity, r: int, seq: int = 1) -> bytes:
    ids = (1, 2, 3)
    rec = RolloutRecord(task_id="arithmetic:1:1", completion_ids=ids, completion_text="bcd",
                        behaviour_logprobs=(-0.5,) * 3, truncated=False)
    b = RolloutBatch(sender=ident.peer_id, round=r, policy_version=1, model_fingerprint="m",
                     tokenizer_fingerprint="tok", created_at=time.time(), rollouts=(rec,))
    return envelope_to_bytes(sign(encode(b), ident, seq))


def test_hostile_clients_cannot_attribute_forge_or_flood_past_an_honest_node(broker, idents):
    """A raw MQTT client on a broker with no ACL: a body signed by one node under another's id, a
    tampered body, a replay, garbage parts, bad topics and a body declared past the limit. The
    honest publisher's envelope is still admitted, and each hostile one is counted."""
    me, peer, thief = Identity.generate(), Identity.generate(), Identity.generate()
    r = int(time.time() // 10)
    clock = RoundClock(10.0)

    async def main():
        # A swarm of its own: the earlier tests' retained heartbeats are not announcements.
        t = transport(broker, me, 0, "anonymous", swarm="h")
        ex = _exchange(t, me, clock)
        await ex.start()
        honest = transport(broker, peer, 0, "anonymous", swarm="h")
        await honest.start()
        try:
            env = _envelope(peer, r)
            async with aiomqtt.Client("127.0.0.1", broker.ports["anonymous"],
                                      protocol=aiomqtt.ProtocolVersion.V5) as raw:
                pre = "swarm-node/h/rollouts"
                # the thief's own valid envelope, published under the honest peer's id (another round's slot)
                await raw.publish(f"{pre}/{peer.peer_id}/{r - 1}/0", split(_envelope(thief, r - 1), 60000)[0], qos=1)
                tampered = bytearray(_envelope(peer, r - 2, seq=2))
                tampered[-70] ^= 1
                await raw.publish(f"{pre}/{peer.peer_id}/{r - 2}/0", split(bytes(tampered), 60000)[0], qos=1)
                await raw.publish(f"{pre}/{thief.peer_id}/{r}/0", b"garbage", qos=1)
                await raw.publish(f"{pre}/not-a-peer-id/{r}/0", split(b"x", 100)[0], qos=1)
                await raw.publish(f"{pre}/{thief.peer_id}/{r}/0/extra", split(b"x", 100)[0], qos=1)
                huge = split(b"h" * (5 << 20), 60000)[0]  # a first part declaring 5 MiB: over every limit
                await raw.publish(f"{pre}/{thief.peer_id}/{r + 1}/0", huge, qos=1)
            await honest.publish(r, env, 60)

            async def settled():
                s = ex.stats.rejected
                return ex.available(r) >= 1 and s.get("sender_mismatch", 0) >= 1 and s.get("bad_signature", 0) >= 1

            await until(settled, 15, "the honest envelope admitted and both forgeries refused")
            # Replaying the honest envelope on a later round's slot: refused as a replay (same seq).
            before = dict(ex.stats.rejected)
            async with aiomqtt.Client("127.0.0.1", broker.ports["anonymous"],
                                      protocol=aiomqtt.ProtocolVersion.V5) as raw:
                await raw.publish(f"swarm-node/h/rollouts/{peer.peer_id}/{r - 3}/0", split(env, 60000)[0], qos=1)

            async def replay_refused():
                return sum(ex.stats.rejected.values()) > sum(before.values())

            await until(replay_refused, 10, "the replay refused")
            rej = {**ex.stats.rejected, **t.rejected}
            # (the topic one level too deep is not even delivered: a node reads rounds' topics only)
            assert rej == {"sender_mismatch": 1, "bad_signature": 1, "replay": 1, "bad_part": 1, "bad_topic": 1,
                           "oversized": 1}, rej
            assert ex.available(r) == 1, "the honest envelope is still usable"
        finally:
            await honest.close()
            await ex.close()

    asyncio.run(main())


def test_a_client_reusing_a_nodes_peer_id_as_its_client_id_does_not_kick_it_off(broker, idents):
    """A client id is not a secret; a broker drops the older of two connections with one id. The
    node's id carries a random suffix (and the broker's logins use the user name as the id)."""
    async def main():
        victim, other = transport(broker, idents[0], 0, "anonymous", swarm="k"), transport(broker, idents[1], 1,
                                                                                             "anonymous", swarm="k")
        await victim.start(), await other.start()
        try:
            async with aiomqtt.Client("127.0.0.1", broker.ports["anonymous"], identifier=idents[0].peer_id,
                                      protocol=aiomqtt.ProtocolVersion.V5):
                await victim.publish(9, b"still here", 60)
                got = await collect(other, [9], 1)
            assert [d.data for d in got] == [b"still here"]
            assert victim.link.connected.is_set() and victim.link.reconnects == 0
        finally:
            await victim.close(), await other.close()

    asyncio.run(main())


def test_first_parts_declaring_megabytes_from_many_ids_do_not_crowd_out_an_honest_body(broker, idents):
    """Without an ACL: 40 fresh ids each send, for 7 rounds, a first part declaring 4 MiB (45 bytes
    each: a budget reserved on declarations would be spent 40 times over). The honest peer's
    1 MiB body in 17 parts still arrives, and one publisher's many rounds hold two slots at most."""
    async def main():
        t = transport(broker, idents[0], 0, "anonymous", swarm="f", max_buffered=16 * 1024 * 1024)
        honest = transport(broker, idents[1], 0, "anonymous", swarm="f")
        await t.start(), await honest.start()
        try:
            r = 1000
            await t.poll(range(r - 4, r + 1))  # the window: rounds r-4 .. r (+2 ahead)
            async with aiomqtt.Client("127.0.0.1", broker.ports["anonymous"], protocol=aiomqtt.ProtocolVersion.V5) as raw:
                declared = split(b"z" * (4 << 20), 64 * 1024)[0][:HEADER_SIZE] + b"z"  # 1 byte of a 4 MiB body
                for k in range(40):
                    pid = Identity.generate().peer_id
                    for rr in range(r - 4, r + 3):
                        await raw.publish(f"swarm-node/f/rollouts/{pid}/{rr}/0", declared, qos=1)
            body = bytes(range(256)) * 4096
            await honest.publish(r, body, 60)
            got = await collect(t, range(r - 4, r + 1), 1)
            assert [(d.publisher, d.data) for d in got] == [(idents[1].peer_id, body)]
            assert len(t._parts) <= 2 * 40 and t._parts.held <= 80
        finally:
            await t.close(), await honest.close()

    asyncio.run(main())


def test_a_publisher_republishing_one_round_over_and_over_is_handed_over_twice_at_most(broker, idents):
    async def main():
        t, p = transport(broker, idents[0], 0, "anonymous", swarm="rp"), transport(broker, idents[1], 0, "anonymous",
                                                                                     swarm="rp")
        await t.start(), await p.start()
        try:
            got = []
            for k in range(5):
                await p.publish(50, f"version {k}".encode(), 60)
                got += await collect(t, [50], 1) if k < 2 else []
            await p.publish(50, b"version 5", 60)

            async def counted():
                got.extend(await t.poll([50]))
                return t.counts["republished"] >= 1

            await until(counted, 10, "the third body of round 50 refused")
            assert len(got) == 2
        finally:
            await t.close(), await p.close()

    asyncio.run(main())
