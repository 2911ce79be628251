"""The hivemind transport on loopback: real DHT nodes and p2p daemons, in one event loop: the
exchange through the index and streams, hostile publishers and hosts, joining, heartbeats."""

from __future__ import annotations

import asyncio
import hashlib
import struct
import time

import pytest

from swarm_node.node.transport.base import MAX_ENVELOPE_SIZE, TransportError
from swarm_node.node.transport.hivemind.index import round_key
from swarm_node.node.transport.hivemind.index_records import index_entry
from swarm_node.node.transport.hivemind.records import OwnerSignatureValidator
from swarm_node.node.transport.hivemind.rollout_stream import handler_name as _handler_name
from swarm_node.node.transport.hivemind.daemon import start_dht_node, stop_dht_node
from tests.helpers.hivemind_dht import (LOOPBACK, _bootstrap, _hostile_server, _now_round, _store_entries,  # noqa: F401
                                       _transport, ident, pid)

pytestmark = pytest.mark.daemon


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
    t._polled = 7
    t.admitted("sn1" + "a" * 32, 7)  # a later verified body from that publisher clears its host too
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
