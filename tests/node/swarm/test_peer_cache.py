"""The peer cache (node/swarm/peer_cache.py): who gets in, the bound, the signature on disk; and a
hivemind node whose bootstrap is gone joining the swarm through a peer it cached."""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass

import pytest

from swarm_node.node.swarm.peer_cache import ADDRS_PER_PEER, PeerCache
from swarm_node.protocol.identity import Identity


@dataclass
class _Heard:  # what the cache reads of a verified Announcement
    addrs: tuple[str, ...]


def _cache(tmp_path, limit=64, ident=None) -> PeerCache:
    return PeerCache(tmp_path / "peers.json", ident or Identity.generate(), limit=limit)


def test_only_peers_heard_and_trained_on_get_in_with_a_few_addresses(tmp_path):
    c = _cache(tmp_path)
    heard = {"sn1a": _Heard(tuple(f"/ip4/10.0.0.1/tcp/{p}/p2p/Qma1gXV82LENwR9EF5nq6Tnuzknm1cbUob5Hyxwk3xnHik" for p in range(10))),
             "sn1b": _Heard(("/ip4/10.0.0.2/tcp/1/p2p/Qma1gXV82LENwR9EF5nq6Tnuzknm1cbUob5Hyxwk3xnHik",)),  # heard, never trained on: a heartbeat costs nothing
             "sn1c": _Heard(())}  # trained on, no address to join through
    assert c.note(heard, {"sn1a": 3, "sn1c": 1}, now=100.0)
    assert list(c.peers) == ["sn1a"] and len(c.peers["sn1a"]["addrs"]) == ADDRS_PER_PEER
    assert not c.note(heard, {"sn1a": 3}, now=110.0)  # nothing new within a minute: no rewrite


def test_addresses_that_do_not_parse_or_name_no_peer_are_left_out(tmp_path):
    """One peer's garbage address must not sink a join: the daemon refuses a bootstrap list with
    one entry it cannot parse (found by a hostile read of the cache)."""
    c = _cache(tmp_path)
    good = "/ip4/10.0.0.9/tcp/7/p2p/Qma1gXV82LENwR9EF5nq6Tnuzknm1cbUob5Hyxwk3xnHik"
    c.note({"sn1a": _Heard(("garbage", "/ip4/127.0.0.1/tcp/2", good))}, {"sn1a": 2}, now=1.0)
    assert c.addrs() == [good]
    c.peers["sn1b"] = {"addrs": ["/ip4/1.2.3.4/tcp/5/p2p/not-a-peer-id"], "seen": 2.0}  # an old file's entry
    assert c.addrs() == [good]


def test_permuting_addresses_buys_no_rank_and_one_peer_gives_two_join_addresses(tmp_path):
    c = _cache(tmp_path)
    addrs = tuple(f"/ip4/10.0.1.{i}/tcp/1/p2p/Qma1gXV82LENwR9EF5nq6Tnuzknm1cbUob5Hyxwk3xnHik" for i in range(4))
    c.note({"sn1honest": _Heard(("/ip4/10.0.2.1/tcp/1/p2p/Qma1gXV82LENwR9EF5nq6Tnuzknm1cbUob5Hyxwk3xnHik",))}, {"sn1honest": 2, "sn1sybil": 2}, now=10.0)
    c.note({"sn1sybil": _Heard(addrs)}, {"sn1honest": 2, "sn1sybil": 2}, now=5.0)
    for t in (11.0, 12.0, 13.0):  # the Sybil reorders its addresses every heartbeat
        c.note({"sn1sybil": _Heard(addrs[::-1] if t % 2 else addrs)}, {"sn1sybil": 2}, now=t)
    assert c.peers["sn1sybil"]["seen"] == 5.0  # not refreshed by a change of addresses
    assert c.addrs()[0] == "/ip4/10.0.2.1/tcp/1/p2p/Qma1gXV82LENwR9EF5nq6Tnuzknm1cbUob5Hyxwk3xnHik"  # the honest peer, heard last, first
    assert len(c.addrs()) == 3  # the Sybil's 4 addresses give 2


def test_the_most_recently_heard_are_kept_and_tried_first(tmp_path):
    c = _cache(tmp_path, limit=2)
    for i, t in enumerate((10.0, 30.0, 20.0)):
        c.note({f"sn1p{i}": _Heard((f"/ip4/10.0.0.{i}/tcp/1/p2p/Qma1gXV82LENwR9EF5nq6Tnuzknm1cbUob5Hyxwk3xnHik",))}, {f"sn1p{i}": 2}, now=t)
    assert set(c.peers) == {"sn1p1", "sn1p2"}  # the one heard longest ago made room
    assert c.addrs() == ["/ip4/10.0.0.1/tcp/1/p2p/Qma1gXV82LENwR9EF5nq6Tnuzknm1cbUob5Hyxwk3xnHik", "/ip4/10.0.0.2/tcp/1/p2p/Qma1gXV82LENwR9EF5nq6Tnuzknm1cbUob5Hyxwk3xnHik"]


def test_the_file_is_signed_and_a_tampered_or_foreign_one_is_refused(tmp_path, caplog):
    me = Identity.generate()
    c = _cache(tmp_path, ident=me)
    c.note({"sn1a": _Heard(("/ip4/10.0.0.1/tcp/1/p2p/Qma1gXV82LENwR9EF5nq6Tnuzknm1cbUob5Hyxwk3xnHik",))}, {"sn1a": 2}, now=1.0)
    c.save()
    assert _cache(tmp_path, ident=me).load().addrs() == ["/ip4/10.0.0.1/tcp/1/p2p/Qma1gXV82LENwR9EF5nq6Tnuzknm1cbUob5Hyxwk3xnHik"]
    doc = json.loads((tmp_path / "peers.json").read_text())
    doc["peers"]["sn1a"]["addrs"] = ["/ip4/6.6.6.6/tcp/1/p2p/Qma1gXV82LENwR9EF5nq6Tnuzknm1cbUob5Hyxwk3xnHik"]  # an attacker's address written into the file
    (tmp_path / "peers.json").write_text(json.dumps(doc))
    assert _cache(tmp_path, ident=me).load().peers == {}
    assert "not this node's" in caplog.text
    c.save()
    assert _cache(tmp_path).load().peers == {}  # another node's cache
    (tmp_path / "peers.json").write_text("{not json")
    assert _cache(tmp_path, ident=me).load().peers == {}


@pytest.mark.daemon
def test_a_node_whose_bootstrap_is_gone_joins_through_a_cached_peer(tmp_path):
    """Three hivemind peers on loopback: a bootstrap, a peer that joined through it, and a node
    whose only bootstrap has stopped; its cache holds the second peer, so it joins through it and
    says so."""
    from tests.helpers.hivemind_dht import _bootstrap, _transport, pid

    async def go():
        boot, maddrs = await _bootstrap()
        peer = _transport(pid("cached-peer"), maddrs)
        late = None
        try:
            await peer.start()
            cache = _cache(tmp_path)
            cache.note({pid("cached-peer"): _Heard(tuple(peer.maddrs))}, {pid("cached-peer"): 2}, now=1.0)
            # An older entry's address that names no peer: the join must not fail on it.
            cache.peers["sn1junk"] = {"addrs": ["/ip4/127.0.0.1/tcp/2"], "seen": 0.5}
            await boot.shutdown()  # the only bootstrap is gone
            late = _transport(pid("late"), maddrs, fallback_peers=cache.addrs)
            await late.start()
            return late.found_via, late.info()["routing_peers"]
        finally:
            for t in (late, peer):
                if t is not None:
                    await t.close()

    via, routing = asyncio.run(go())
    assert via.startswith("peer cache") and routing >= 1


@pytest.mark.daemon
def test_with_no_cache_a_dead_bootstrap_still_fails_with_its_message():
    from swarm_node.node.transport.base import TransportError
    from tests.helpers.hivemind_dht import _bootstrap, _transport, pid

    async def go():
        boot, maddrs = await _bootstrap()
        await boot.shutdown()
        t = _transport(pid("alone"), maddrs, fallback_peers=lambda: [])
        try:
            await t.start()
        finally:
            await t.close()

    with pytest.raises(TransportError, match="no bootstrap peer answered"):
        asyncio.run(go())


@pytest.mark.daemon
def test_only_addresses_whose_host_served_the_publisher_are_kept(tmp_path):
    """Over real daemons: a reader fetched a body from the publisher's host. The publisher's signed
    heartbeat also names another /p2p/ id (the bootstrap's), and a second key, trained on as
    long, names the publisher's host as its own: neither address is kept, only the host that
    served the publisher's body, for the publisher."""
    from types import SimpleNamespace

    from swarm_node.node.swarm.peer_cache import keep_peer_cache
    from tests.helpers.hivemind_dht import _bootstrap, _now_round, _transport, pid

    async def go():
        boot, maddrs = await _bootstrap()
        pub, reader = _transport(pid("served-pub"), maddrs), _transport(pid("served-reader"), maddrs)
        try:
            for t in (pub, reader):
                await t.start()
            r = _now_round()
            await pub.publish(r, b"a body" * 100, expires_in=60)
            for _ in range(50):  # the index entry reaches the reader's read within a few polls
                if await reader.poll([r]):
                    break
            else:
                raise AssertionError("the reader never fetched the publisher's body")
            work = {pid("served-pub"): 3, pid("served-liar"): 3}
            heard = {pid("served-pub"): _Heard((pub.maddrs[0], maddrs[0])),
                     pid("served-liar"): _Heard((pub.maddrs[0],))}
            ex = SimpleNamespace(peers=heard, work=work, stats=SimpleNamespace(groups_used=work), transport=reader)
            cache = _cache(tmp_path)
            task = asyncio.ensure_future(keep_peer_cache(ex, cache, 3600.0))
            await asyncio.sleep(0)
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
            return cache.peers, pub.maddrs[0]
        finally:
            for t in (reader, pub):
                await t.close()
            await boot.shutdown()

    peers, served = asyncio.run(go())
    assert list(peers) == [pid("served-pub")] and peers[pid("served-pub")]["addrs"] == [served]
