"""A source and followers over a real hivemind DHT and p2p streams, in one process: versions of a
real policy reach the followers' policies, a late follower finds the newest one through the DHT,
and the DHT keeps only owner-signed weights records of the right shape."""

from __future__ import annotations

import asyncio

import pytest
import torch

from swarm_node.node.transport.hivemind.directory import MAX_UNVOUCHED_RELAYS, WeightDirectory, relay_order
from swarm_node.node.broadcast.follow import WeightFollower, WeightSource, fresh_enough
from swarm_node.node.transport.hivemind.carrier import HivemindCarrier
from swarm_node.node.broadcast.peer import BroadcastPeer
from swarm_node.node.transport.hivemind.index import FOLLOWER_LEVEL, followers_key, shard_prefix, weights_key
from swarm_node.node.transport.hivemind.records import bootstrap_validator
from swarm_node.node.transport.hivemind.index_records import swarm_validator
from swarm_node.node.transport.hivemind.daemon import start_dht_node, stop_dht_node
from swarm_node.policies.policy import Policy
from swarm_node.protocol.identity import Identity
from tests.helpers.wait import wait_for

pytestmark = [pytest.mark.usefixtures("one_torch_thread"), pytest.mark.daemon]
LOOPBACK = dict(host_maddrs=["/ip4/127.0.0.1/tcp/0"], use_relay=False, nat_port_map=False)
SWARM = "t"


def test_fresh_enough_is_the_staleness_bound():
    assert not fresh_enough(None, 3, 2)  # nothing applied: nothing to generate with
    assert fresh_enough(1, 3, 2) and not fresh_enough(1, 4, 2) and fresh_enough(4, None, 0)


def _announced(*peers: str) -> dict:
    return {p: (f"/ip4/1.2.3.4/tcp/1/p2p/12D3KooW{p}", 0) for p in peers}


def test_the_relay_order_rotates_and_no_claim_buys_a_place():
    followers = ["sn1a", "sn1b", "sn1c", "sn1d"]
    orders = {tuple(relay_order(_announced(*followers), v)) for v in range(4, 40)}
    assert len(orders) > 1 and all(sorted(o) == followers for o in orders)  # the end of the chain moves
    addr = "/ip4/1.2.3.4/tcp/1/p2p/12D3KooWa"
    assert relay_order({"sn1a": (addr, 2 ** 62), "sn1b": (addr, -1)}, 5) == relay_order(_announced("sn1b", "sn1a"), 5)


def test_vouched_followers_relay_first_and_strangers_get_only_a_few_places():
    strangers = [f"sn1s{i:03d}" for i in range(50)]
    order = relay_order(_announced(*strangers, "sn1w1", "sn1w2"), 7, vouched={"sn1w1", "sn1w2", "sn1gone"})
    assert sorted(order[:2]) == ["sn1w1", "sn1w2"]  # (a vouched peer that did not announce: not listed)
    assert len(order) == 2 + MAX_UNVOUCHED_RELAYS and set(order[2:]) <= set(strangers)


def test_followers_reached_only_through_a_relay_come_after_the_direct_ones_of_their_group():
    """A relay cuts a connection after about 128 KiB (docs/nat.md): a follower behind NAT keeps
    its place (a vouched one ahead of fresh ids) but after the direct followers of its group, so
    the nodes below it find a direct one near (they skip it: node/broadcast/fetch.py)."""
    nat = {f"sn1nat{i}": (f"/ip4/1.2.3.4/tcp/1/p2p/12D3KooWrelay/p2p-circuit/p2p/12D3KooWnat{i}", 3) for i in range(8)}
    followers = {**_announced("sn1a", "sn1b", "sn1s0", "sn1s1", "sn1s2", "sn1s3"), **nat}
    vouched = {"sn1a", "sn1b", *nat}
    for v in range(4, 20):
        order = relay_order(followers, v, vouched=vouched)
        assert sorted(order[:2]) == ["sn1a", "sn1b"] and sorted(order[2:10]) == sorted(nat)  # fresh ids last
        assert sorted(order[10:]) == ["sn1s0", "sn1s1", "sn1s2", "sn1s3"]
    # a direct address that merely has the word in a name is direct
    odd = {"sn1dns": ("/dns4/p2p-circuit.example.org/tcp/4001/p2p/12D3KooWdns", 0), **_announced("sn1z")}
    assert {tuple(relay_order(odd, v)) for v in range(4, 40)} == {("sn1dns", "sn1z"), ("sn1z", "sn1dns")}


async def _node(identity: Identity, initial_peers):
    node = await start_dht_node(initial_peers=initial_peers, retries=0,
                                record_validator=swarm_validator(SWARM, 5.0, identity), **LOOPBACK)
    return node


async def _teardown(tasks, followers, src_peer, nodes, boot) -> None:
    for t in tasks:
        t.cancel()
    for f in followers:
        await f.peer.close()
    if src_peer is not None:
        await src_peer.close()
    for n in nodes:
        await stop_dht_node(n)
    await boot.shutdown()


def _perturb(policy: Policy, seed: int) -> None:
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in policy.model.parameters():
            p.add_(0.01 * torch.randn(p.shape, generator=g))


def _same(a: Policy, b: Policy) -> bool:
    sa, sb = a.model.state_dict(), b.model.state_dict()
    return all(torch.equal(sa[k], sb[k]) for k in sa)


def test_versions_reach_the_followers_policies_through_the_dht_and_streams(tiny_model_dir, tmp_path):
    async def go():
        boot = await start_dht_node(initial_peers=[], retries=0, record_validator=bootstrap_validator(), **LOOPBACK)
        maddrs = [str(m) for m in await boot.p2p.get_visible_maddrs()]
        src_id = Identity.generate()
        ids = [Identity.generate() for _ in range(3)]
        nodes, tasks, followers = [], [], []
        src_peer = None
        try:
            src_node = await _node(src_id, maddrs)
            nodes.append(src_node)
            src_policy = Policy.load(tiny_model_dir, seed=0)
            carrier = HivemindCarrier(src_node.p2p, SWARM)
            src_peer = BroadcastPeer(src_id, carrier, swarm=SWARM, directory={})
            await src_peer.start()
            source = WeightSource(src_policy, src_peer,
                                  WeightDirectory(src_node, SWARM, src_id.peer_id, src_id.peer_id))

            async def add_follower(ident):
                node = await _node(ident, maddrs)
                nodes.append(node)
                policy = Policy.load(tiny_model_dir, seed=0)
                peer = BroadcastPeer(ident, HivemindCarrier(node.p2p, SWARM), swarm=SWARM, directory={},
                                     follow=src_id.peer_id)
                f = WeightFollower(policy, peer, WeightDirectory(node, SWARM, src_id.peer_id, ident.peer_id),
                                   poll_s=0.2)
                await f.start()
                await f.poll_once()  # announced before the source cuts its first version
                tasks.append(asyncio.ensure_future(f.run()))
                followers.append(f)
                return f

            for ident in ids[:2]:
                await add_follower(ident)
            for v in (1, 2, 3):
                _perturb(src_policy, v)
                m = await source.publish(version=v, step=10 * v)
                await wait_for(lambda: all(f.applied == v for f in followers))
                assert all(_same(src_policy, f.policy) for f in followers)
            relays = m.relays
            late = await add_follower(ids[2])  # not in any manifest: finds v3 through the DHT pointer
            await wait_for(lambda: late.applied == 3)
            statuses = [f.status() for f in followers]
            same = all(_same(src_policy, f.policy) for f in followers)
            seen = await source.directory.read_followers()
            return relays, statuses, same, seen
        finally:
            await _teardown(tasks, followers, src_peer, nodes, boot)

    relays, statuses, same, seen = asyncio.run(go())
    assert same
    # The followers the source read from the DHT relay (a read may miss a just-stored announcement:
    # that follower is then a leaf, and still got every version); the late one is a leaf.
    assert 1 <= len(relays) <= 2
    assert [s["applied_version"] for s in statuses] == [3, 3, 3] and all(s["lag"] == 0 for s in statuses)
    assert [s["applied_versions"] for s in statuses] == [3, 3, 1] and all(s["fresh_enough"] for s in statuses)
    assert 2 <= len(seen) <= 3  # the followers' announcements, owner-signed, are in the DHT


def test_the_dht_refuses_weights_records_out_of_shape_or_under_another_peers_subkey():
    async def go():
        from hivemind.utils import get_dht_time

        boot = await start_dht_node(initial_peers=[], retries=0, record_validator=bootstrap_validator(), **LOOPBACK)
        maddrs = [str(m) for m in await boot.p2p.get_visible_maddrs()]
        src, mallory = Identity.generate(), Identity.generate()
        a, b = await _node(src, maddrs), await _node(mallory, maddrs)
        try:
            key = weights_key(SWARM, src.peer_id)
            shard = followers_key(SWARM, src.peer_id, shard_prefix(mallory.peer_id, FOLLOWER_LEVEL))
            other = next(followers_key(SWARM, src.peer_id, x) for x in "0123456789abcdef"
                         if x != shard_prefix(mallory.peer_id, FOLLOWER_LEVEL))
            addr = "/ip4/1.2.3.4/tcp/1/p2p/12D3KooWMrfg6tTVDtAeGjEfVjExerrtnGSr8XZfBDkBMMobEUgK"
            exp = get_dht_time() + 60
            follower = lambda k, **kw: {"k": k, "addr": addr, "applied": -1, **kw}  # noqa: E731
            results = {
                # mallory's own follower record, in its shard: fine
                "follower": await b.store(shard, follower(shard), exp, subkey=mallory.peer_id),
                # ... in another shard, or on the pointer's key (a flood there would hide the pointer)
                "other_shard": await b.store(other, follower(other), exp, subkey=mallory.peer_id),
                "on_pointer_key": await b.store(key, follower(key), exp, subkey=mallory.peer_id),
                # a pointer under mallory's subkey: only the source's subkey holds one
                "pointer_as_follower": await b.store(key, {"k": key, "v": 9, "d": "0" * 64, "addr": addr}, exp,
                                                     subkey=mallory.peer_id),
                # a pointer under the source's subkey, but signed by mallory
                "planted_pointer": await b.store(key, {"k": key, "v": 9, "d": "0" * 64, "addr": addr}, exp,
                                                 subkey=src.peer_id),
                "too_long": await b.store(shard, follower(shard), get_dht_time() + 7200, subkey=mallory.peer_id),
                # an address the learner could not dial (or that breaks its table of children)
                "unix_addr": await b.store(shard, follower(shard, addr="/unix/tmp/p2pd.sock"), exp,
                                           subkey=mallory.peer_id),
                # the source's own pointer: fine
                "pointer": await a.store(key, {"k": key, "v": 3, "d": "1" * 64, "addr": addr}, exp, subkey=src.peer_id),
            }
            d = WeightDirectory(a, SWARM, src.peer_id, src.peer_id)

            async def seen(k):  # what an honest node reads there (a lenient replica may hold more)
                found = await a.get(k, latest=True)
                return set(found.value) if found is not None and isinstance(found.value, dict) else set()

            views = {"shard": await seen(shard), "other": await seen(other), "pointer_key": await seen(key)}
            got = await a.get(shard, latest=True)
            views["shard_expires_in"] = got.value[mallory.peer_id].expiration_time - get_dht_time()
            return results, views, await d.read_pointer(), await d.read_followers(), mallory.peer_id, src.peer_id
        finally:
            await stop_dht_node(a)
            await stop_dht_node(b)
            await boot.shutdown()

    results, views, pointer, followers, mallory, source = asyncio.run(go())
    assert results["follower"] and results["pointer"]
    # What an honest node reads back (a bootstrap peer keeps any owner-signed record, so a store can
    # report success where only that lenient replica took it): one follower record in its own shard,
    # with its own address and lifetime (the too-long and /unix ones did not replace it), none in
    # another shard, and only the source's pointer on the pointer's key.
    expires_in = views.pop("shard_expires_in")
    assert views == {"shard": {mallory}, "other": set(), "pointer_key": {source}}
    assert expires_in <= 61 and followers[mallory][0].startswith("/ip4/1.2.3.4/")
    assert pointer is not None and pointer.version == 3  # the source's, not mallory's version 9
    assert set(followers) == {mallory}


def test_a_flood_of_fresh_follower_identities_neither_hides_the_pointer_nor_delays_vouched_workers(
        tiny_model_dir):
    """200 identities announce as followers (owner-signed, well-formed, unreachable); the source
    still reads its pointer, its two vouched workers relay first and get the version with no
    fallback, and only a few strangers are listed as relays."""
    from swarm_node.node.sim.adversary import SybilNode
    from hivemind.utils import get_dht_time

    async def go():
        boot = await start_dht_node(initial_peers=[], retries=0, record_validator=bootstrap_validator(), **LOOPBACK)
        maddrs = [str(m) for m in await boot.p2p.get_visible_maddrs()]
        src_id, ids = Identity.generate(), [Identity.generate() for _ in range(2)]
        sybil = SybilNode(SWARM, 5.0, 4, dict(initial_peers=maddrs, **LOOPBACK))
        nodes, followers, tasks, src_peer = [], [], [], None
        try:
            await sybil.start()
            src_node = await _node(src_id, maddrs)
            nodes.append(src_node)
            src_peer = BroadcastPeer(src_id, HivemindCarrier(src_node.p2p, SWARM), swarm=SWARM, directory={})
            await src_peer.start()
            source = WeightSource(Policy.load(tiny_model_dir, seed=0), src_peer,
                                  WeightDirectory(src_node, SWARM, src_id.peer_id, src_id.peer_id))
            for ident in ids:
                node = await _node(ident, maddrs)
                nodes.append(node)
                peer = BroadcastPeer(ident, HivemindCarrier(node.p2p, SWARM), swarm=SWARM, directory={},
                                     follow=src_id.peer_id)
                f = WeightFollower(Policy.load(tiny_model_dir, seed=0), peer,
                                   WeightDirectory(node, SWARM, src_id.peer_id, ident.peer_id), poll_s=0.2)
                await f.start()
                await f.poll_once()
                followers.append(f)
            dead = "/ip4/127.0.0.1/tcp/1/p2p/12D3KooWMrfg6tTVDtAeGjEfVjExerrtnGSr8XZfBDkBMMobEUgK"  # nobody
            entries = []
            for _ in range(200):
                s = Identity.generate()
                sybil.add(s)
                k = followers_key(SWARM, src_id.peer_id, shard_prefix(s.peer_id, FOLLOWER_LEVEL))
                entries.append((k, s.peer_id, {"k": k, "addr": dead, "applied": 2 ** 40}, get_dht_time() + 60))
                entries.append((source.directory.key, s.peer_id, {"k": source.directory.key, "v": 99,
                                                                    "d": "0" * 64, "addr": dead}, get_dht_time() + 60))
            await sybil.put(entries)
            tasks.extend(asyncio.ensure_future(f.run()) for f in followers)
            m = await source.publish(version=1, step=1, vouched={i.peer_id for i in ids})

            async def applied():
                while not all(f.applied == 1 for f in followers):
                    await asyncio.sleep(0.05)
            await asyncio.wait_for(applied(), 60)
            pointer = await source.directory.read_pointer()
            found = await src_node.get(source.directory.key, latest=True)
            return (len(m.relays), len(await source.directory.read_followers()), set(found.value), m.relays,
                    {i.peer_id for i in ids}, pointer, [f.peer.stats.fallbacks for f in followers], src_id.peer_id)
        finally:
            await sybil.close()
            await _teardown(tasks, followers, src_peer, nodes, boot)

    n_relays, n_followers, on_pointer_key, relays, workers, pointer, fallbacks, src = asyncio.run(go())
    assert n_followers >= 150  # their follower records are kept (a read may miss a few)
    assert on_pointer_key == {src}  # 200 planted pointers: none kept, so none can crowd out or hide it
    assert set(relays[:2]) == workers and n_relays == 2 + MAX_UNVOUCHED_RELAYS
    assert pointer is not None and pointer.version == 1
    assert fallbacks == [0, 0]  # the vouched workers were first in the chain: no stranger in front
