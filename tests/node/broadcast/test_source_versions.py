"""A source never signs a version number twice, even restarted behind it (resumed from an older
checkpoint, or with its run folder gone while its DHT pointer lives)."""

from __future__ import annotations

import asyncio

import pytest

from swarm_node.node.transport.carrier import MemoryCarrier, MemoryHub
from swarm_node.node.transport.hivemind.directory import Pointer
from swarm_node.node.broadcast.follow import WeightSource
from swarm_node.node.broadcast.peer import BroadcastPeer
from swarm_node.node.broadcast.store import ChunkStore
from swarm_node.policies.policy import Policy
from swarm_node.protocol.identity import Identity

pytestmark = pytest.mark.usefixtures("one_torch_thread")


class _Directory:
    """The DHT side: no followers; a pointer as the DHT would hold it."""

    def __init__(self, pointer: Pointer | None = None):
        self.pointer = pointer

    async def read_followers(self, near=None):
        return {}

    async def read_pointer(self):
        return self.pointer

    async def announce_version(self, m, address):
        self.pointer = Pointer(m.version, m.digest, address)
        return True


def test_a_restarted_source_continues_past_the_last_version_it_signed(tiny_model_dir, tmp_path):
    async def go():
        ident, policy = Identity.generate(), Policy.load(tiny_model_dir, seed=0)
        store = ChunkStore(tmp_path / "broadcast")

        async def source(directory):
            peer = BroadcastPeer(ident, MemoryCarrier(MemoryHub(), "src"), swarm="s", directory={})
            await peer.start()
            return WeightSource(policy, peer, directory, store=store), peer

        first, p1 = await source(_Directory())
        assert await first.next_free_version() == 0
        await first.publish(version=0, step=0)
        await first.publish(version=7, step=70)
        await p1.close()

        again, p2 = await source(_Directory())  # the pointer expired; the disk remembers
        free = await again.next_free_version()
        with pytest.raises(ValueError, match="not newer"):
            await again.publish(version=3, step=30)  # what a learner resumed at update 3 would sign
        await again.publish(version=free, step=30)
        await p2.close()

        store_lost = ChunkStore(tmp_path / "elsewhere")  # a new run folder: the DHT pointer remembers
        peer = BroadcastPeer(ident, MemoryCarrier(MemoryHub(), "src"), swarm="s", directory={})
        third = WeightSource(policy, peer, _Directory(Pointer(8, b"\0" * 32, "a")), store=store_lost)
        return free, await third.next_free_version(), store.load_manifest("published").version

    free, from_pointer, saved = asyncio.run(go())
    assert free == 8 and saved == 8 and from_pointer == 9
