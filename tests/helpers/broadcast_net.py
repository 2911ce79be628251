"""A broadcast source and followers in one process, on an in-memory hub (``Net``), and weights
whose chunks are all different (chunks are content-addressed); a source that outpaces its
follower's link (``outpace``), with the follower's chunk folder sampled meanwhile: for the
broadcast's tests."""

from __future__ import annotations

import asyncio
import os
import random
from typing import Callable

from swarm_node.node.broadcast.peer import BroadcastPeer
from swarm_node.node.broadcast.store import ChunkStore
from swarm_node.node.transport.carrier import MemoryCarrier, MemoryHub
from swarm_node.node.transport.ratelimit import TokenBucket
from swarm_node.protocol.identity import Identity
from swarm_node.protocol.manifest import Manifest

SWARM = "s"
META = dict(step=7, model_fingerprint="mf", tokenizer_fingerprint="tf", format="safetensors-full")


class Net:
    """A source and followers on one hub; ``got[name]`` = the versions each follower was handed."""

    def __init__(self, n: int, tmp_path=None, upload: float | None = None, **peer_kw):
        self.hub = MemoryHub()
        self.ids = {name: Identity.generate() for name in ["src"] + [f"f{i}" for i in range(n)]}
        self.directory = {i.peer_id: name for name, i in self.ids.items()}
        self.tmp, self.upload, self.peer_kw = tmp_path, upload, peer_kw
        self.got: dict[str, list[tuple[int, bytes]]] = {name: [] for name in self.ids}
        self.peers: dict[str, BroadcastPeer] = {}

    def pid(self, name: str) -> str:
        return self.ids[name].peer_id

    def make(self, name: str, carrier_cls=MemoryCarrier) -> BroadcastPeer:
        async def on_version(m: Manifest, data: bytes, name=name):
            self.got[name].append((m.version, data))

        bucket = TokenBucket(self.upload) if self.upload else None
        store = ChunkStore(self.tmp / name) if self.tmp is not None and name != "src" else None
        p = BroadcastPeer(self.ids[name], carrier_cls(self.hub, name, bucket), swarm=SWARM, directory=self.directory,
                          follow=None if name == "src" else self.pid("src"), store=store, on_version=on_version,
                          **self.peer_kw)
        self.peers[name] = p
        return p

    async def start(self, carrier_cls=None):
        for name in self.ids:
            if carrier_cls and name in carrier_cls:
                self.make(name, carrier_cls[name])
            else:
                self.make(name)
        for p in self.peers.values():
            await p.start()

    def followers(self) -> list[str]:
        return [self.pid(n) for n in self.ids if n != "src"]

    async def wait_all(self, version: int, timeout: float = 30.0, names=None):
        names = names or [n for n in self.ids if n != "src"]

        async def done():
            while not all(any(v == version for v, _ in self.got[n]) for n in names):
                await asyncio.sleep(0.01)
        await asyncio.wait_for(done(), timeout)

    async def close(self):
        for p in self.peers.values():
            await p.close()


def weights(size: int, seed: int = 0) -> bytes:
    return random.Random(seed).randbytes(size)  # no two chunks alike (chunks are content-addressed)


def chunk_bytes(folder) -> int:
    """Bytes of the files in ``folder`` now (chunks written and being written)."""
    total = 0
    for entry in os.scandir(folder):
        try:
            total += entry.stat().st_size
        except FileNotFoundError:  # renamed or pruned while we looked
            pass
    return total


async def outpace(src: BroadcastPeer, follower: BroadcastPeer, moved: Callable[[], int], folder, *,
                  versions: int, size: int, chunk_size: int, per_publish: float) -> tuple[list, list, int]:
    """Publish versions 1..``versions`` from ``src``, the next each time the follower's link has
    moved ``per_publish`` of a version (``moved()``: its bytes so far), so the source outpaces the
    link whatever the machine's load; then wait until the follower applies the last. The
    follower's chunk folder is sampled all along. Returns the versions applied while the source
    was publishing, the lag of each version applied (newest published - it) read as it was
    applied, and the most bytes seen in the folder."""
    published, applied, lags, peak = [0], [], [], 0
    on_version = follower.on_version

    async def applying(m: Manifest, data: bytes) -> None:
        lags.append(published[-1] - m.version)
        applied.append(m.version)
        if on_version is not None:
            await on_version(m, data)

    follower.on_version = applying
    for v in range(1, versions + 1):
        await src.publish(weights(size, v), version=v, relays=[follower.me], chunk_size=chunk_size, **META)
        published.append(v)
        mark = moved() + per_publish * size
        while moved() < mark:
            peak = max(peak, chunk_bytes(folder))
            await asyncio.sleep(0.002)
    while_publishing = list(applied)
    while not applied or applied[-1] != versions:
        peak = max(peak, chunk_bytes(folder))
        await asyncio.sleep(0.002)
    return while_publishing, lags, peak
