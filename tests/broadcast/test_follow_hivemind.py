"""A source and followers over a real hivemind DHT and p2p streams, in one process: versions of a
real policy reach the followers' policies, a late follower finds the newest one through the DHT,
and the DHT keeps only owner-signed weights records of the right shape."""

from __future__ import annotations

import asyncio

import pytest
import torch

from node.broadcast.directory import WeightDirectory, relay_order
from node.broadcast.follow import WeightFollower, WeightSource, fresh_enough
from node.broadcast.hivemind_carrier import HivemindCarrier
from node.broadcast.peer import BroadcastPeer
from node.transport.dht_index import weights_key
from node.transport.dht_records import bootstrap_validator
from node.transport.hivemind_dht import start_dht_node, stop_dht_node, swarm_validator
from policies.policy import Policy
from protocol.identity import Identity

pytestmark = pytest.mark.usefixtures("one_torch_thread")
LOOPBACK = dict(host_maddrs=["/ip4/127.0.0.1/tcp/0"], use_relay=False, nat_port_map=False)
SWARM = "t"


def test_fresh_enough_is_the_staleness_bound():
    assert not fresh_enough(None, 3, 2)  # nothing applied: nothing to generate with
    assert fresh_enough(1, 3, 2) and not fresh_enough(1, 4, 2) and fresh_enough(4, None, 0)


def test_the_relay_order_rotates_and_no_claim_buys_a_place():
    followers = ["sn1a", "sn1b", "sn1c", "sn1d"]
    orders = {tuple(relay_order(followers, v)) for v in range(4, 40)}
    assert len(orders) > 1 and all(sorted(o) == followers for o in orders)  # the end of the chain moves
    assert relay_order({"sn1a": ("addr", 2 ** 62), "sn1b": ("addr", -1)}, 5) == relay_order(["sn1b", "sn1a"], 5)


async def _node(identity: Identity, initial_peers):
    node = await start_dht_node(initial_peers=initial_peers, retries=0,
                                record_validator=swarm_validator(SWARM, 5.0, identity), **LOOPBACK)
    return node


def _perturb(policy: Policy, seed: int) -> None:
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in policy.model.parameters():
            p.add_(0.01 * torch.randn(p.shape, generator=g))


def _same(a: Policy, b: Policy) -> bool:
    sa, sb = a.model.state_dict(), b.model.state_dict()
    return all(torch.equal(sa[k], sb[k]) for k in sa)


def test_versions_reach_the_followers_policies_through_the_dht_and_streams(tiny_model_dir, tmp_path):
    async def wait_for(cond, timeout=60.0):
        async def loop():
            while not cond():
                await asyncio.sleep(0.05)
        await asyncio.wait_for(loop(), timeout)

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
            _, seen = await source.directory.read()
            return relays, statuses, same, seen
        finally:
            for t in tasks:
                t.cancel()
            for f in followers:
                await f.peer.close()
            if src_peer is not None:
                await src_peer.close()
            for n in nodes:
                await stop_dht_node(n)
            await boot.shutdown()

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
        boot = await start_dht_node(initial_peers=[], retries=0, record_validator=bootstrap_validator(), **LOOPBACK)
        maddrs = [str(m) for m in await boot.p2p.get_visible_maddrs()]
        src, mallory = Identity.generate(), Identity.generate()
        a, b = await _node(src, maddrs), await _node(mallory, maddrs)
        try:
            key = weights_key(SWARM, src.peer_id)
            from hivemind.utils import get_dht_time
            exp = get_dht_time() + 60
            results = {
                # mallory's own follower record: fine
                "follower": await b.store(key, {"k": key, "addr": "/ip4/1.2.3.4/tcp/1/p2p/12D3KooWMrfg6tTVDtAeGjEfVjExerrtnGSr8XZfBDkBMMobEUgK",
                                                "applied": -1}, exp,
                                          subkey=mallory.peer_id),
                # a pointer under mallory's subkey: only the source's subkey holds one
                "pointer_as_follower": await b.store(key, {"k": key, "v": 9, "d": "0" * 64, "addr": "x"}, exp,
                                                     subkey=mallory.peer_id),
                # a pointer under the source's subkey, but signed by mallory
                "planted_pointer": await b.store(key, {"k": key, "v": 9, "d": "0" * 64, "addr": "x"}, exp,
                                                 subkey=src.peer_id),
                "too_long": await b.store(key, {"k": key, "addr": "x", "applied": 1}, get_dht_time() + 7200,
                                          subkey=mallory.peer_id),
                # an address the learner could not dial (or that breaks its table of children)
                "unix_addr": await b.store(key, {"k": key, "addr": "/unix/tmp/p2pd.sock", "applied": 1}, exp,
                                           subkey=mallory.peer_id),
            }
            found = await a.get(key, latest=True)
            return results, (set(found.value) if found else set()), mallory.peer_id
        finally:
            await stop_dht_node(a)
            await stop_dht_node(b)
            await boot.shutdown()

    results, subkeys, mallory = asyncio.run(go())
    assert results["follower"] and not results["pointer_as_follower"] and not results["too_long"]
    assert not results["unix_addr"]
    assert subkeys == {mallory}  # only mallory's well-formed follower record; no pointer under the source
