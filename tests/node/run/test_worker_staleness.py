"""A worker never generates with weights more than S versions behind what its learner announced."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from swarm_node.node.transport.carrier import MemoryCarrier, MemoryHub
from swarm_node.node.transport.hivemind.directory import WeightDirectory
from swarm_node.node.run.role_context import RoleContext
from swarm_node.node.config.config import BroadcastConfig
from swarm_node.node.broadcast.follow import WeightFollower, WeightSource
from swarm_node.node.broadcast.peer import BroadcastPeer
from swarm_node.node.run.roles import WorkerRole
from swarm_node.node.swarm.pool import PeerGroup
from swarm_node.node.observe.status import StatusFile
from swarm_node.policies.policy import Policy
from swarm_node.protocol.identity import Identity

pytestmark = pytest.mark.usefixtures("one_torch_thread")


def _ctx(max_staleness=2, learner_version=0, step=0, status=None, stop=False) -> RoleContext:
    """A role's view of a node that has no swarm connection (the roles here never start one)."""
    return RoleContext(settings=BroadcastConfig(max_staleness=max_staleness), swarm_name="s", run_dir=Path("."),
                       policy=None, transport=None, identity=None,
                       learner_version=lambda: learner_version, step=lambda: step, stop_requested=lambda: stop,
                       set_phase=status.phase if status is not None else (lambda *a: None))


class _NoDHT:
    """A source publishing without a DHT: the offer down the tree is what reaches the worker here."""

    async def read_followers(self, near=None):
        return {}

    async def read_pointer(self):
        return None

    async def announce_version(self, *a, **k):
        return True


def test_a_worker_waits_until_its_weights_are_within_the_bound(tiny_model_dir, tmp_path):
    async def go():
        hub = MemoryHub()
        src_id, w_id = Identity.generate(), Identity.generate()
        directory = {src_id.peer_id: "src", w_id.peer_id: "w"}
        src_peer = BroadcastPeer(src_id, MemoryCarrier(hub, "src"), swarm="s", directory=dict(directory))
        w_peer = BroadcastPeer(w_id, MemoryCarrier(hub, "w"), swarm="s", directory=dict(directory),
                               follow=src_id.peer_id)
        await src_peer.start()
        source = WeightSource(Policy.load(tiny_model_dir, seed=0), src_peer, _NoDHT())
        follower = WeightFollower(Policy.load(tiny_model_dir, seed=0), w_peer,
                                  WeightDirectory(None, "s", src_id.peer_id, w_id.peer_id), max_staleness=2)
        await follower.start()
        role = WorkerRole()
        role.follower = follower
        status = StatusFile(tmp_path, 10, "m")
        node = _ctx(status=status)

        async def publish(v):
            await source.publish(version=v, step=v)
            follower.peer.offer(source.last)  # no relays (nobody announced): hand it over as an offer would
            await asyncio.wait_for(_until(lambda: follower.applied == v), 30)

        await publish(1)
        follower.pointer_version = 5  # the learner announced version 5; the worker holds 1
        waiting = asyncio.ensure_future(role.before_step(node))
        await asyncio.sleep(0.5)
        blocked = not waiting.done()
        phase = status.phase_name
        await publish(3)  # 5 - 3 = 2 = S: fresh enough again
        await asyncio.wait_for(waiting, 5)
        version = role.rollout_version(node)
        await w_peer.close()
        await src_peer.close()
        return blocked, version, phase

    blocked, version, phase = asyncio.run(go())
    assert blocked  # 5 - 1 = 4 > S: it did not go on to generate
    assert version == 3 and phase == "waiting for the learner's weights"


def test_a_restarted_worker_does_not_trust_its_saved_version_until_it_hears_the_learner(tiny_model_dir, tmp_path):
    """Killed and restarted, a worker puts its saved version back; its learner may be far ahead by
    then, so it is not fresh enough until the learner's pointer or a new version says how far."""
    from swarm_node.node.broadcast.store import ChunkStore

    async def go():
        hub = MemoryHub()
        src_id, w_id = Identity.generate(), Identity.generate()
        directory = {src_id.peer_id: "src", w_id.peer_id: "w"}
        src_peer = BroadcastPeer(src_id, MemoryCarrier(hub, "src"), swarm="s", directory=dict(directory))
        await src_peer.start()
        source = WeightSource(Policy.load(tiny_model_dir, seed=0), src_peer, _NoDHT())

        def follower_at(addr: str) -> WeightFollower:
            peer = BroadcastPeer(w_id, MemoryCarrier(hub, addr), swarm="s", directory=dict(directory, **{w_id.peer_id: addr}),
                                 follow=src_id.peer_id, store=ChunkStore(tmp_path / "w"))
            return WeightFollower(Policy.load(tiny_model_dir, seed=0), peer,
                                  WeightDirectory(None, "s", src_id.peer_id, w_id.peer_id), max_staleness=2)

        first = follower_at("w")
        await first.start()
        await source.publish(version=1, step=1)
        first.peer.offer(source.last)
        await asyncio.wait_for(_until(lambda: first.applied == 1), 30)
        fresh_before = first.fresh_enough()
        await first.peer.close()  # killed
        again = follower_at("w2")
        await again.start()  # puts version 1 back from its store
        restored, fresh_restored = again.applied, again.fresh_enough()
        await source.publish(version=2, step=2)
        again.peer.offer(source.last)  # a new version from the network: now it knows
        await asyncio.wait_for(_until(lambda: again.applied == 2), 30)
        fresh_after = again.fresh_enough()
        await again.peer.close()
        await src_peer.close()
        return fresh_before, restored, fresh_restored, fresh_after

    fresh_before, restored, fresh_restored, fresh_after = asyncio.run(go())
    assert fresh_before and restored == 1 and not fresh_restored and fresh_after


async def _until(cond):
    while not cond():
        await asyncio.sleep(0.01)


def test_a_learner_keeps_only_its_workers_groups_of_versions_it_published_within_the_bound():
    from swarm_node.node.run.roles import LearnerRole

    role = LearnerRole()
    role.followers, role.published, role.published_versions = {"sn1w", "sn1x"}, 10, {6: 6, 8: 8, 10: 10}
    node = _ctx(max_staleness=2, learner_version=10)
    g = lambda sender, v: PeerGroup(sender, 1, v, "mf", "tf", "t", ())  # noqa: E731
    kept, info = role.admit_groups(node, [g("sn1w", 10), g("sn1w", 8), g("sn1w", 9), g("sn1w", 6),
                                          g("sn1w", 11), g("sn1full", 3)])
    # 9 was never published, 6 is 4 behind, 11 is in the future; a full peer's own versions pass
    assert [(x.sender, x.policy_version) for x in kept] == [("sn1w", 10), ("sn1w", 8), ("sn1full", 3)]
    assert info == {"worker_groups": 2, "worker_lag_mean": 1.0, "worker_dropped_stale": 3}
    assert kept[0].policy_version == 10 and role.vouched == set()  # one step's work is not yet a record
    for step in (1, 2):
        role.admit_groups(_ctx(max_staleness=2, learner_version=10, step=step), [g("sn1w", 10)])
    assert role.vouched_at(2) == {"sn1w"}  # admitted at 3 steps: it relays first next time
    assert role.vouched_at(200) == set()  # ... until it has not worked for FOLLOWERS.idle steps


def test_a_learner_restarted_behind_a_signed_version_maps_new_numbers_to_its_own_updates():
    """After a restart from an older checkpoint the learner signs learner version + offset; a
    worker still on the old life's version 12 (other weights, same number) is dropped."""
    from swarm_node.node.run.roles import LearnerRole

    role = LearnerRole()
    role.offset = 5  # the old life signed up to version 14; it resumed at update 10
    role.followers, role.published, role.published_versions = {"sn1w"}, 15, {15: 10}
    node = _ctx(max_staleness=2, learner_version=11)
    g = lambda v: PeerGroup("sn1w", 1, v, "mf", "tf", "t", ())  # noqa: E731
    kept, info = role.admit_groups(node, [g(15), g(12), g(11)])
    assert [x.policy_version for x in kept] == [10]  # 15 = update 10 (relabelled), one behind; 12, 11: another life's
    assert info["worker_lag_mean"] == 1.0 and info["worker_dropped_stale"] == 2
