"""The swarm's DHT records on loopback and by hand: what the record validators keep (owner-signed
entries, bounded expirations, nothing that could censor a round), what a raw hivemind client can
and cannot write, and the fetch slots and size estimate that read them."""

from __future__ import annotations

import asyncio
import hashlib
import struct
import time

import pytest
from hivemind.dht.protocol import DHTProtocol
from hivemind.dht.routing import DHTID

from swarm_node.node.transport.base import MAX_ENVELOPE_SIZE, TransportError
from swarm_node.node.transport.hivemind.index import peers_key, round_key
from swarm_node.node.transport.hivemind.records import OwnerSignatureValidator
from swarm_node.node.transport.hivemind.index_records import heartbeat_entry, index_entry
from swarm_node.node.transport.hivemind.transport import HivemindTransport
from swarm_node.node.transport.hivemind.daemon import start_dht_node, stop_dht_node
from swarm_node.protocol.identity import Identity
from tests.helpers.standing import give_standing
from tests.helpers.hivemind_dht import (LOOPBACK, _bootstrap, _hostile_server, _now_round,  # noqa: F401
                                       _transport, ident, pid)

pytestmark = pytest.mark.daemon

def test_record_validator_refuses_what_could_censor_a_round():
    from hivemind.dht.validation import DHTRecord
    from hivemind.utils import get_dht_time

    from swarm_node.node.transport.hivemind.index import shard_prefix
    from swarm_node.node.transport.hivemind.records import MAX_RECORD_TTL_S
    from swarm_node.node.transport.hivemind.index_records import SwarmRecordValidator

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

    from swarm_node.node.transport.hivemind.index_records import SwarmRecordValidator

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

    from swarm_node.node.transport.hivemind.records import bootstrap_validator

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
            give_standing(b, pid("a"))  # a verified history: b admitted a's envelopes before
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
