"""The hivemind transport on loopback: real DHT nodes and p2p daemons, in one event loop."""

from __future__ import annotations

import asyncio
import hashlib
import struct
import time

import pytest
from hivemind.dht.protocol import DHTProtocol
from hivemind.dht.routing import DHTID

from node.transport.base import MAX_ENVELOPE_SIZE, TransportError
from node.transport.hivemind.records import OwnerSignatureValidator, bootstrap_validator
from node.transport.hivemind.index import peers_key, round_key
from node.transport.hivemind.rollout_stream import handler_name as _handler_name
from node.transport.hivemind.index_records import heartbeat_entry, index_entry
from node.transport.hivemind.transport import HivemindTransport
from node.transport.hivemind.daemon import start_dht_node, stop_dht_node
from protocol.identity import Identity

pytestmark = pytest.mark.daemon

LOOPBACK = dict(host_maddrs=["/ip4/127.0.0.1/tcp/0"], use_relay=False, nat_port_map=False)


def _now_round() -> int:
    """The current round of the transports' clock (round_seconds 5). Read when a test starts, not
    at import: validators refuse entries of rounds more than 33 back, and the whole suite takes
    longer than that to reach these tests."""
    return int(time.time() // 5)


_IDS: dict[str, Identity] = {}


def ident(name: str) -> Identity:
    """One Ed25519 identity per name: the peer's DHT records are signed with it."""
    return _IDS.setdefault(name, Identity.generate())


def pid(name: str) -> str:
    """The peer id of ``name`` (the DHT validator only accepts those as subkeys)."""
    return ident(name).peer_id


async def _bootstrap():
    # As `swarm-node bootstrap` runs it: it refuses records their owners did not sign.
    node = await start_dht_node(initial_peers=[], retries=0, record_validator=bootstrap_validator(), **LOOPBACK)
    return node, [str(m) for m in await node.p2p.get_visible_maddrs()]


def _transport(peer_id: str, maddrs, **kw) -> HivemindTransport:
    signer = next(i for i in _IDS.values() if i.peer_id == peer_id)
    return HivemindTransport(swarm="t", publisher=peer_id, signer=signer, initial_peers=maddrs, join_retries=0,
                             **LOOPBACK, **kw)


def test_peers_exchange_envelopes_through_dht_index_and_streams():
    R = _now_round()
    async def go():
        boot, maddrs = await _bootstrap()
        ts = [_transport(pid(f"node{i}"), maddrs) for i in range(3)]
        try:
            for t in ts:
                await t.start()
            for i, t in enumerate(ts):
                await t.publish(R + 1, bytes([i]) * 200_000, expires_in=60)  # > DHT value limits
            got = [await t.poll([R, R + 1]) for t in ts]
            again = [await t.poll([R, R + 1]) for t in ts]
            return got, again
        finally:
            for t in ts:
                await t.close()
            await boot.shutdown()

    got, again = asyncio.run(go())
    ids = [pid(f"node{i}") for i in range(3)]
    for i, deliveries in enumerate(got):
        assert sorted(d.publisher for d in deliveries) == sorted(ids[j] for j in range(3) if j != i)
        assert all(d.round == R + 1 and d.data == bytes([ids.index(d.publisher)]) * 200_000 for d in deliveries)
    assert again == [[], [], []]  # each envelope is delivered once


async def _hostile_server(maddrs, reply: bytes, index: dict, rounds=None, keys=("hostile",)):
    """A peer that publishes an index record under each of ``keys`` (correctly signed: keys are
    free) and answers fetches with ``reply`` (raw); ``node.requests`` counts the fetches."""
    validator = OwnerSignatureValidator(ident(keys[0]))
    node = await start_dht_node(initial_peers=maddrs, retries=0, record_validator=validator, **LOOPBACK)
    node.requests = 0

    async def serve(info, reader, writer):
        node.requests += 1
        await reader.readexactly(8)
        writer.write(reply)
        await writer.drain()
        writer.close()

    await node.p2p.add_binary_stream_handler(_handler_name("t"), serve)
    await _store_entries(node, validator, index, rounds or (_now_round(),), keys)
    return node


async def _store_entries(node, validator, index: dict, rounds, keys, p2p: str | None = None) -> None:
    """Entries under each of ``keys`` pointing at ``p2p`` (default: this node's own host)."""
    from hivemind.utils import get_dht_time

    node.validator = validator
    for name in keys:
        validator.signer = ident(name)  # one host, many keys: the validator signs for each in turn
        for r in rounds:
            key, sub, value = index_entry("t", r, pid(name), p2p or node.p2p.peer_id.to_base58(), index["size"],
                                          index["sha256"])
            await node.store(key, value, get_dht_time() + 60, subkey=sub)


@pytest.mark.parametrize("case", ["declared_oversized", "indexed_oversized", "more_than_usable",
                                  "more_than_indexed", "hash_mismatch", "vanishes_mid_transfer",
                                  "no_longer_holds"])
def test_hostile_publishers_are_refused_without_buffering(case):
    R = _now_round()
    body = b"x" * 1000
    sha = hashlib.sha256(body).hexdigest()
    reply, index = {
        # The stream header claims more than any envelope may be: refused before reading.
        "declared_oversized": (struct.pack(">Q", 2**40), {"size": 1000, "sha256": sha}),
        "indexed_oversized": (b"", {"size": MAX_ENVELOPE_SIZE + 1, "sha256": sha}),
        # More than the node could use (poll's max_size): not fetched at all (a fetch of this
        # empty reply would count a fetch failure).
        "more_than_usable": (b"", {"size": 1000, "sha256": sha}),
        # The stream frames more than the signed entry announced: refused before reading (read,
        # the 1000 bytes sent would end short of the frame: a fetch failure, not a refusal).
        "more_than_indexed": (struct.pack(">Q", 2000) + b"x" * 1000, {"size": 1000, "sha256": sha}),
        "hash_mismatch": (struct.pack(">Q", 1000) + b"y" * 1000, {"size": 1000, "sha256": sha}),
        "vanishes_mid_transfer": (struct.pack(">Q", 1000) + b"x" * 10, {"size": 1000, "sha256": sha}),
        # Length 0: a restarted publisher whose older entries are still in the DHT. Routine.
        "no_longer_holds": (struct.pack(">Q", 0), {"size": 1000, "sha256": sha}),
    }[case]

    async def go():
        boot, maddrs = await _bootstrap()
        hostile = await _hostile_server(maddrs, reply, index, rounds=(R,))  # the round the test polls
        t = _transport(pid("victim"), maddrs)
        try:
            await t.start()
            max_size = 999 if case == "more_than_usable" else None
            polls = [await t.poll([R], max_size=max_size) for _ in range(4)]
            return polls, t.rejected, t.fetch_failures
        finally:
            await t.close()
            await hostile.shutdown()
            await boot.shutdown()

    polls, rejected, failures = asyncio.run(go())
    assert polls == [[], [], [], []]
    if case in ("vanishes_mid_transfer", "no_longer_holds"):  # churn, not an attack: given up, not refused
        assert rejected == {} and failures == 1
    elif case == "indexed_oversized":  # no replica keeps an entry announcing more than the limit
        assert rejected == {} and failures == 0
    else:
        expected = {"declared_oversized": "oversized", "more_than_usable": "oversized",
                    "more_than_indexed": "hash_mismatch", "hash_mismatch": "hash_mismatch"}[case]
        assert rejected == {expected: 1} and failures == 0  # counted once, never fetched again


def test_a_host_that_served_a_bad_body_is_skipped_under_its_fresh_keys():
    R = _now_round()
    body = b"x" * 1000
    index = {"size": 1000, "sha256": hashlib.sha256(body).hexdigest()}

    async def go():
        boot, maddrs = await _bootstrap()
        hostile = await _hostile_server(maddrs, struct.pack(">Q", 1000) + b"y" * 1000, index, (R,), keys=("sybil1",))
        t = _transport(pid("victim"), maddrs)
        try:
            await t.start()
            deadline = time.monotonic() + 30
            while not t.rejected and time.monotonic() < deadline:  # a newcomer explores sybil1's entry
                await t.poll([R], want=1)
            first = dict(t.rejected), hostile.requests
            # A fresh key on the same host, in a round with its explore budget unspent.
            await _store_entries(hostile, hostile.validator, index, (R + 1,), ("sybil2",))
            found = False
            while not found and time.monotonic() < deadline:  # until the victim's DHT node sees it
                await t.poll([R, R + 1], want=1)
                got = await t._node.get(round_key("t", R + 1, ""), latest=True)
                found = got is not None and pid("sybil2") in got.value
            for _ in range(3):  # a fetch started with the read would have reached the host by now
                await t.poll([R, R + 1], want=1)
            return first, dict(t.rejected), hostile.requests, found
        finally:
            await t.close()
            await hostile.shutdown()
            await boot.shutdown()

    first, rejected, requests, found = asyncio.run(go())
    assert first == ({"hash_mismatch": 1}, 1) and found
    assert rejected == {"hash_mismatch": 1} and requests == 1  # sybil2's entry never fetched


def test_junk_keys_pointing_at_an_honest_host_are_skipped_once_it_said_whom_it_serves():
    R = _now_round()

    async def go():
        boot, maddrs = await _bootstrap()
        honest, victim = _transport(pid("honest"), maddrs), _transport(pid("victim"), maddrs)
        hostile = None
        try:
            await honest.start(), await victim.start()
            body = b"h" * 500
            await honest.publish(R, body, expires_in=60)
            index = {"size": 500, "sha256": hashlib.sha256(body).hexdigest()}
            # Junk keys whose signed entries point at the honest node's host.
            hostile = await _hostile_server(maddrs, b"", index, (R + 1,), keys=("junk1",))
            await _store_entries(hostile, hostile.validator, index, (R + 1,), ("junk1", "junk2", "junk3"),
                                 p2p=honest.p2p_peer_id)
            deadline = time.monotonic() + 30
            got = []
            while time.monotonic() < deadline and not (got and victim.misdirected >= 2):
                got += await victim.poll([R, R + 1], want=1)  # a newcomer: one unknown key a round
            return got, victim.misdirected, honest.refused_requests, dict(victim._fetcher.strikes.owners)
        finally:
            for t in (victim, honest):
                await t.close()
            if hostile is not None:
                await hostile.shutdown()
            await boot.shutdown()

    got, misdirected, refused, owners = asyncio.run(go())
    assert [(d.publisher, d.data) for d in got] == [(pid("honest"), b"h" * 500)]
    assert set(owners.values()) == {pid("honest")}  # the honest host's own word
    # The first junk entry tried cost the honest host one refusal; the others were skipped unfetched.
    assert refused == 1 and misdirected == 2


def test_a_refusal_is_blamed_on_the_host_that_served_that_round():
    t = _transport(pid("victim"), [])
    hosts = t._fetcher.strikes.hosts
    t._fetcher.strikes.served_by[(5, "sn1" + "a" * 32)] = "hostA"
    t.distrust("sn1" + "a" * 32, 6)  # round 6's body came from nowhere we fetched: no host to blame
    assert hosts.until == {}
    t.distrust("sn1" + "a" * 32, 5)
    assert set(hosts.until) == {"hostA"} and hosts.counts == {"hostA": 1}
    t.vouch("sn1" + "a" * 32)  # a later verified body from that publisher clears its host too
    assert hosts.counts == {}


def test_unreachable_bootstrap_fails_with_a_clear_message_after_retries(caplog):
    async def go():
        boot, maddrs = await _bootstrap()
        peer_id = maddrs[0].rsplit("/p2p/", 1)[1]
        await boot.shutdown()  # nobody answers at this address any more
        dead = [f"/ip4/127.0.0.1/tcp/1/p2p/{peer_id}"]
        return await start_dht_node(initial_peers=dead, retries=1, backoff=0.1, **LOOPBACK)

    with pytest.raises(TransportError, match="no bootstrap peer answered.*reachable"):
        asyncio.run(go())
    assert any("retrying in" in r.message for r in caplog.records)


def test_daemon_startup_timeout_names_the_setting():
    with pytest.raises(TransportError, match="startup_timeout"):
        asyncio.run(start_dht_node(initial_peers=[], retries=0, startup_timeout=0.001, **LOOPBACK))


def test_heartbeats_live_in_the_dht():
    async def go():
        boot, maddrs = await _bootstrap()
        a, b = _transport(pid("a"), maddrs), _transport(pid("b"), maddrs)
        try:
            await a.start(), await b.start()
            await a.announce(b"heartbeat-1", expires_in=60)
            first = await b.poll_announcements()
            same = await b.poll_announcements()
            await a.announce(b"heartbeat-2", expires_in=60)
            second = await b.poll_announcements()
            return first, same, second
        finally:
            await a.close(), await b.close()
            await boot.shutdown()

    first, same, second = asyncio.run(go())
    assert [(d.publisher, d.data) for d in first] == [(pid("a"), b"heartbeat-1")]
    assert same == []
    assert [(d.publisher, d.data) for d in second] == [(pid("a"), b"heartbeat-2")]


def test_a_stalling_publisher_does_not_hold_up_honest_deliveries():
    R = _now_round()
    async def go():
        boot, maddrs = await _bootstrap()
        node = await start_dht_node(initial_peers=maddrs, retries=0,
                                    record_validator=OwnerSignatureValidator(ident("staller")), **LOOPBACK)

        async def stall(info, reader, writer):  # accepts the request, never answers
            await asyncio.sleep(60)

        await node.p2p.add_binary_stream_handler(_handler_name("t"), stall)
        from hivemind.utils import get_dht_time

        key, sub, value = index_entry("t", R, pid("staller"), node.p2p.peer_id.to_base58(), 10, "0" * 64)
        await node.store(key, value, get_dht_time() + 60, subkey=sub)
        honest, victim = _transport(pid("honest"), maddrs), _transport(pid("victim"), maddrs)
        try:
            await honest.start(), await victim.start()
            await honest.publish(R, b"honest body", expires_in=60)
            t0 = asyncio.get_running_loop().time()
            got = await victim.poll([R])
            return got, asyncio.get_running_loop().time() - t0
        finally:
            await honest.close(), await victim.close()
            await stop_dht_node(node)
            await boot.shutdown()

    got, elapsed = asyncio.run(go())
    assert [(d.publisher, d.data) for d in got] == [(pid("honest"), b"honest body")]
    assert elapsed < 5  # bounded by FETCH_WAIT_S, not by the staller's 60 s


def test_record_validator_refuses_what_could_censor_a_round():
    from hivemind.dht.validation import DHTRecord
    from hivemind.utils import get_dht_time

    from node.transport.hivemind.index import shard_prefix
    from node.transport.hivemind.records import MAX_RECORD_TTL_S
    from node.transport.hivemind.index_records import SwarmRecordValidator

    v = SwarmRecordValidator("t", round_seconds=5.0)
    ser = DHTProtocol.serializer
    now = get_dht_time()
    r = int(now // 5)
    key = lambda raw: DHTID.generate(source=raw).to_bytes()  # noqa: E731
    x = pid("x")

    def entry(rnd, prefix="", **change):
        k, _, value = index_entry("t", rnd, x, "Qm", 10, "a" * 64, prefix)
        return k, {**value, **change}

    def ok(raw_key, subkey, value, ttl=60.0):
        sub = DHTProtocol.IS_REGULAR_VALUE if subkey is None else ser.dumps(subkey)
        return v.validate(DHTRecord(key(raw_key), sub, ser.dumps(value), now + ttl))

    assert ok(*entry(r)[:1], x, entry(r)[1])
    assert ok(*entry(r + 2)[:1], x, entry(r + 2)[1])  # a little ahead (clocks differ)
    assert not ok(*entry(r + 100)[:1], x, entry(r + 100)[1])  # far ahead: nothing planted for later
    assert not ok(*entry(r - 40)[:1], x, entry(r - 40)[1])  # long past: no one reads it
    other_swarm = index_entry("u", r, x, "Qm", 10, "a" * 64)
    assert not ok(other_swarm[0], x, other_swarm[2])  # not this swarm's
    k, good = entry(r)
    assert not ok(k, None, b"junk", ttl=1e9)  # the plain-value overwrite
    assert not ok(k, None, good)
    assert not ok(k, "sn1hostile", good)  # not a peer id
    assert not ok(k, x, {**good, "extra": 1})
    assert not ok(k, x, {**good, "size": MAX_ENVELOPE_SIZE + 1})
    assert not ok(k, x, {**good, "sha256": "zz"})
    assert not ok(k, x, {**good, "k": round_key("t", r + 1, "")})  # names another key than its own
    assert not ok(round_key("t", r + 1, ""), x, {**good, "k": "swarm-node/t/rollouts/x/"})
    # Shards: an entry lives at its publisher's prefix of each level, nowhere else.
    mine, other = shard_prefix(x, 2), ("00" if shard_prefix(x, 2) != "00" else "01")
    assert ok(*[(kk, vv) for kk, vv in [entry(r, mine)]][0][:1], x, entry(r, mine)[1])
    assert not ok(entry(r, other)[0], x, entry(r, other)[1])
    hk, _, hb = heartbeat_entry("t", x, b"heartbeat", shard_prefix(x, 1))
    assert ok(hk, x, hb)
    assert not ok(hk, x, hb, ttl=5.0 * 8 + 61)  # a heartbeat outliving 8 rounds (+ slack)
    assert not ok(hk, x, {**hb, "hb": b"x" * 9000})
    assert not ok(hk, None, b"junk")
    # Another level-1 prefix than its own (x is a fresh key each run: other[:1] may be its own).
    other1 = "0" if shard_prefix(x, 1) != "0" else "1"
    assert not ok(peers_key("t", other1), x, {**hb, "k": peers_key("t", other1)})
    assert not ok("someone/else", x, {"k": "someone/else"})  # not an index key
    assert not ok(k, x, good, ttl=MAX_RECORD_TTL_S * 3)  # nothing planted for later
    assert not ok(k, x, good, ttl=float("nan"))  # NaN passes every "too late" bound: refused first
    assert not ok(round_key("t", 1, "").replace("/1/", "/\u00b2/"), x, {**good, "k": "swarm-node/t/rollouts/\u00b2/"})


def test_junk_stored_under_a_round_key_does_not_stop_the_exchange():
    import time

    r = int(time.time() // 5)  # a current round of the transports' clock (round_seconds 5)

    async def go():
        boot, maddrs = await _bootstrap()
        # An attacker's DHT node without the validator stores a plain value under the round key.
        attacker = await start_dht_node(initial_peers=maddrs, retries=0, **LOOPBACK)
        from hivemind.utils import get_dht_time

        await attacker.store(round_key("t", r, ""), b"junk", get_dht_time() + 3000)
        a, b = _transport(pid("a"), maddrs), _transport(pid("b"), maddrs)
        try:
            await a.start(), await b.start()
            await attacker.store(round_key("t", r, ""), b"junk", get_dht_time() + 3000)
            await a.publish(r, b"body of a", expires_in=60)
            return await b.poll([r])
        finally:
            await a.close(), await b.close()
            await stop_dht_node(attacker)
            await boot.shutdown()

    got = asyncio.run(go())
    assert [(d.publisher, d.data) for d in got] == [(pid("a"), b"body of a")]


# ------------------------------------------------------------------ owner-signed records (issue 9, item 1)

def test_owner_signature_validator_by_hand():
    from hivemind.dht.validation import DHTRecord
    from hivemind.utils import get_dht_time

    ser = DHTProtocol.serializer
    owner, other = Identity.generate(), Identity.generate()
    key = DHTID.generate(source=round_key("t", 1, "")).to_bytes()
    sub = ser.dumps(owner.peer_id)
    exp = get_dht_time() + 60
    inner = ser.dumps({"p2p": "Qm", "size": 10, "sha256": "a" * 64})
    mine, theirs, judge = OwnerSignatureValidator(owner), OwnerSignatureValidator(other), OwnerSignatureValidator()

    signed = mine.sign_value(DHTRecord(key, sub, inner, exp))
    assert judge.validate(DHTRecord(key, sub, signed, exp))
    assert judge.strip_value(DHTRecord(key, sub, signed, exp)) == inner
    assert not judge.validate(DHTRecord(key, sub, inner, exp))  # unsigned under a peer's subkey
    assert theirs.sign_value(DHTRecord(key, sub, inner, exp)) == inner  # nobody signs for another
    forged = other.sign(b"anything")
    wrong_key = ser.dumps({"d": inner, "pk": other.public_key_bytes, "sig": forged})
    assert not judge.validate(DHTRecord(key, sub, wrong_key, exp))  # a key that is not the subkey's
    assert not judge.validate(DHTRecord(key, sub, signed, exp + 3600))  # the same value, outliving its owner's
    other_key = DHTID.generate(source=round_key("t", 2, "")).to_bytes()
    assert not judge.validate(DHTRecord(other_key, sub, signed, exp))  # moved to another round
    assert not judge.validate(DHTRecord(key, ser.dumps(other.peer_id), signed, exp))  # another subkey
    # Records that are not a peer's (no sn1 subkey) are left to the other validators.
    assert judge.validate(DHTRecord(key, DHTProtocol.IS_REGULAR_VALUE, b"x", exp))
    assert judge.validate(DHTRecord(key, ser.dumps("someone-else"), b"x", exp))


def test_a_round_entry_expires_within_the_swarm_wide_bound():
    from hivemind.dht.validation import DHTRecord
    from hivemind.utils import get_dht_time

    from node.transport.hivemind.index_records import SwarmRecordValidator

    v = SwarmRecordValidator("t", round_seconds=5.0)
    ser = DHTProtocol.serializer
    r = int(get_dht_time() // 5)
    raw, sub, value = index_entry("t", r, pid("x"), "Qm", 10, "a" * 64)
    key, good = DHTID.generate(source=raw).to_bytes(), ser.dumps(value)
    cap = (r + 32) * 5.0 + 60.0  # 32 rounds from its start, on every node whatever its max_round_lag
    assert v.validate(DHTRecord(key, ser.dumps(sub), good, cap))
    assert not v.validate(DHTRecord(key, ser.dumps(sub), good, cap + 1))


def test_a_raw_hivemind_client_cannot_displace_a_peers_entries():
    """An attacker with plain hivemind (none of this project's classes) writes, under honest
    peer a's subkey, an index entry and a heartbeat with later expirations, before and after a
    publishes. hivemind keeps the later expiration, so without owner signatures b would fetch
    from the attacker (and get nothing) and miss a's heartbeat. b still gets both from a."""
    import time

    from hivemind.dht.node import DHTNode
    from hivemind.utils import get_dht_time

    r = int(time.time() // 5)  # a current round of the transports' clock (round_seconds 5)

    async def go():
        boot, maddrs = await _bootstrap()
        attacker = await DHTNode.create(initial_peers=maddrs, host_maddrs=["/ip4/127.0.0.1/tcp/0"],
                                        use_relay=False, nat_port_map=False, auto_nat=False)
        a, b = _transport(pid("a"), maddrs), _transport(pid("b"), maddrs)

        async def plant():
            key, sub, fake = index_entry("t", r, pid("a"), attacker.peer_id.to_base58(), 9,
                                         hashlib.sha256(b"not a's!!").hexdigest())
            hkey, _, dead = heartbeat_entry("t", pid("a"), b"dead")
            later = get_dht_time() + 1800
            return (await attacker.store(key, fake, later, subkey=sub),
                    await attacker.store(hkey, dead, later, subkey=sub))

        try:
            await a.start(), await b.start()
            planted = [await plant()]
            await a.publish(r, b"body of a", expires_in=60)
            await a.announce(b"heartbeat of a", expires_in=60)
            planted.append(await plant())
            bodies = await b.poll([r])
            beats = await b.poll_announcements()
            return planted, bodies, beats
        finally:
            await a.close(), await b.close()
            await stop_dht_node(attacker)
            await boot.shutdown()

    planted, bodies, beats = asyncio.run(go())
    assert planted == [(False, False), (False, False)]  # no replica kept them
    assert [(d.publisher, d.data) for d in bodies] == [(pid("a"), b"body of a")]
    assert [(d.publisher, d.data) for d in beats] == [(pid("a"), b"heartbeat of a")]


def test_the_transport_will_not_write_another_peers_entry():
    async def go():
        t = _transport(pid("w"), [])
        with pytest.raises(PermissionError, match="owner-signed"):
            await t.publish_as(pid("victim"), 1, b"x", 10)
        bad = HivemindTransport(swarm="t", publisher=pid("w"), signer=ident("other"), join_retries=0, **LOOPBACK)
        with pytest.raises(TransportError, match="needs the publisher's identity"):
            await bad.start()

    asyncio.run(go())


def test_a_publisher_whose_body_fails_verification_is_backed_off():
    R = _now_round()
    body = b"x" * 1000
    reply = struct.pack(">Q", 1000) + b"y" * 1000  # not the body its (signed) entry announces

    async def go():
        boot, maddrs = await _bootstrap()
        hostile = await _hostile_server(maddrs, reply, {"size": 1000, "sha256": hashlib.sha256(body).hexdigest()},
                                        rounds=(R, R + 1, R + 6))
        t = _transport(pid("victim"), maddrs)
        try:
            await t.start()
            first = await t.poll([R])  # fetched: hash mismatch, back-off until round R + 2
            later = await t.poll([R + 1])  # inside the back-off: not fetched at all
            after = await t.poll([R + 6])  # past it: fetched again (and fails again)
            return first + later + after, dict(t.rejected), t.backed_off, dict(t._fetcher.strikes.publishers.until)
        finally:
            await t.close()
            await hostile.shutdown()
            await boot.shutdown()

    got, rejected, backed_off, until = asyncio.run(go())
    assert got == [] and rejected == {"hash_mismatch": 2} and backed_off == 2
    assert until == {pid("hostile"): R + 6 + 4}  # the second failure doubles the back-off


def test_a_node_serves_only_its_own_envelope():
    """A (validly signed) entry of a junk key points at an honest node's address: receivers must
    not download the honest node's body for it, so junk cannot spend the honest node's upload."""
    import time

    from hivemind.utils import get_dht_time

    r = int(time.time() // 5)

    async def go():
        boot, maddrs = await _bootstrap()
        a, b = _transport(pid("a"), maddrs), _transport(pid("b"), maddrs)
        junk = await start_dht_node(initial_peers=maddrs, retries=0,
                                    record_validator=OwnerSignatureValidator(ident("junk")), **LOOPBACK)
        try:
            await a.start(), await b.start()
            await a.publish(r, b"body of a", expires_in=60)
            sha = hashlib.sha256(b"something else").hexdigest()
            key, sub, value = index_entry("t", r, pid("junk"), a.p2p_peer_id, 14, sha)
            assert await junk.store(key, value, get_dht_time() + 60, subkey=sub)
            got = [d for _ in range(4) for d in await b.poll([r])]
            return got, a.refused_requests, dict(b.rejected)
        finally:
            await a.close(), await b.close()
            await stop_dht_node(junk)
            await boot.shutdown()

    got, refused, rejected = asyncio.run(go())
    assert [(d.publisher, d.data) for d in got] == [(pid("a"), b"body of a")]
    assert refused >= 1  # asked for the junk key's envelope: refused at once, nothing sent
    assert "hash_mismatch" not in rejected  # it never received a's body under the junk key's entry


def test_the_bootstrap_keeps_only_owner_signed_peer_records():
    # hivemind drops a replica's whole reply for a key when one entry fails the reader's
    # validator: a bootstrap keeping junk the nodes refuse would lose every honest entry with it.
    from hivemind.dht.validation import DHTRecord
    from hivemind.utils import get_dht_time

    from node.transport.hivemind.records import bootstrap_validator

    ser = DHTProtocol.serializer
    v, owner = bootstrap_validator(), Identity.generate()
    key = DHTID.generate(source=round_key("t", 1, "")).to_bytes()
    exp = get_dht_time() + 60
    sub = ser.dumps(owner.peer_id)
    good = OwnerSignatureValidator(owner).sign_value(DHTRecord(key, sub, ser.dumps({"x": 1}), exp))
    assert v.validate(DHTRecord(key, sub, good, exp))
    assert len(v._verified) == 1 and v.validate(DHTRecord(key, sub, good, exp))  # remembered, not re-verified
    assert not v.validate(DHTRecord(key, DHTProtocol.IS_REGULAR_VALUE, b"junk", exp))
    assert not v.validate(DHTRecord(key, ser.dumps("junk"), b"junk", exp))
    far = get_dht_time() + 7200
    far_good = OwnerSignatureValidator(owner).sign_value(DHTRecord(key, sub, ser.dumps({"x": 1}), far))
    assert not v.validate(DHTRecord(key, sub, far_good, far))  # even signed: not for hours ahead


class _ManySigners(OwnerSignatureValidator):
    """One raw DHT node writing the entries of many (free) keys, each signed by its owner."""

    def __init__(self, idents):
        super().__init__()
        self.by_id = {i.peer_id: OwnerSignatureValidator(i) for i in idents}

    def sign_value(self, record):
        owner = self._owner(record)
        return self.by_id[owner].sign_value(record) if owner in self.by_id else record.value


def test_junk_entries_first_cannot_take_the_slots_of_known_peers():
    """Two fresh keys store entries (pointing nowhere) as a round starts, before the honest peer
    has generated anything; the reader fetches them first. Its known peer's envelope, published
    later in the round, must still be fetched: junk spends the unknown budget only."""
    R = _now_round()
    from hivemind.utils import get_dht_time

    junk_ids = [ident(f"junk{i}") for i in range(2)]

    async def go():
        boot, maddrs = await _bootstrap()
        junk = await start_dht_node(initial_peers=maddrs, retries=0, record_validator=_ManySigners(junk_ids),
                                    **LOOPBACK)
        a, b = _transport(pid("a"), maddrs), _transport(pid("b"), maddrs)
        try:
            await a.start(), await b.start()
            b.vouch(pid("a"))  # a verified history: b admitted a's envelopes before
            for j in junk_ids:
                key, sub, value = index_entry("t", R, j.peer_id, junk.peer_id.to_base58(), 10, "0" * 64)
                assert await junk.store(key, value, get_dht_time() + 60, subkey=sub)
            first = await b.poll([R], want=2)  # the junk is all there is yet
            await a.publish(R, b"body of a", expires_in=60)
            got, deadline = [], time.monotonic() + 20
            while not got and time.monotonic() < deadline:  # re-read as the round goes on
                got = await b.poll([R], want=2)
                await asyncio.sleep(0.2)
            return first, got, b.backed_off
        finally:
            await a.close(), await b.close()
            await stop_dht_node(junk)
            await boot.shutdown()

    first, got, backed_off = asyncio.run(go())
    assert first == []
    assert [(d.publisher, d.data) for d in got] == [(pid("a"), b"body of a")]
    assert backed_off == 2  # each junk key's failed fetch backs it off


def test_the_newest_rounds_probes_of_the_levels_above_can_only_raise_the_size_estimate():
    """A reader at 460 of 1,000 peers whose level-1 shards look full (only the writers whose
    estimates are low write there) must count its probes of level 2, read in the newest round."""
    t = _transport(pid("victim"), [])
    R = 100
    t.swarm_size = 460.0
    t._sizes = [(R - 1, 1, 29), (R - 1, 1, 30), (R, 1, 10), (R, 2, 4), (R, 2, 4)]
    t._observe_size(skip_round=R)
    assert t.swarm_size == 1024.0  # 4 entries a level-2 shard x 256 shards (without: 472)
    t._sizes = [(R, 1, 3)]  # the newest round at the node's own level: not counted, either way
    t._observe_size(skip_round=R)
    assert t.swarm_size == 1024.0
    t._sizes = [(R, 3, 0)]  # a probe that found nothing cannot lower it
    t._observe_size(skip_round=R)
    assert t.swarm_size == 1024.0
