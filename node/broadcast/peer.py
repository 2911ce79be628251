"""One node's part in the weight broadcast: it serves what it holds and fetches what it follows.

A *source* (``publish``) signs a manifest for a version's bytes and offers it to its children
in the relay topology (node/broadcast/topology.py). A *follower* (``follow`` set) takes the
followed source's newer versions, chunk by verified chunk, and hands each whole one to
``on_version`` (fetch.py), while it serves what it holds to the nodes below it (serve.py): every
chunk moves down the chain as soon as the node above has verified it. The requests between
nodes are in wire.py. ``BroadcastPeer`` holds the state both share (the versions held, the
addresses, the counters) and runs the two over one carrier.
"""

from __future__ import annotations

import asyncio
import collections
import logging
import time
from typing import Awaitable, Callable

from swarm_node.node.broadcast import topology
from swarm_node.node.broadcast.fetch import Fetcher
from swarm_node.node.broadcast.serve import Server
from swarm_node.node.broadcast.store import ChunkStore
from swarm_node.node.broadcast.transfer import BroadcastStats, Transfer
from swarm_node.node.broadcast.wire import offer_request
from swarm_node.node.transport.addresses import relayed
from swarm_node.node.transport.carrier import Carrier, CarrierError
from swarm_node.protocol.identity import Identity
from swarm_node.protocol.manifest import Manifest, ManifestCheck, build_manifest, choose_chunk_size

log = logging.getLogger(__name__)

__all__ = ["BroadcastPeer"]

HELD_VERSIONS = 2  # versions a node keeps serving at least (the newest and the one before) ...


class BroadcastPeer:
    """Serves held versions; with ``follow`` set, fetches and hands over the source's new ones."""

    def __init__(self, identity: Identity, carrier: Carrier, *, swarm: str,
                 directory: dict[str, str], follow: str | None = None, store: ChunkStore | None = None,
                 on_version: Callable[[Manifest, bytes], Awaitable[None]] | None = None,
                 window: int = 4, chunk_wait_s: float = 5.0, request_timeout_s: float = 20.0,
                 stall_s: float = 20.0, max_staleness: int = 2):
        self.identity, self.carrier, self.swarm = identity, carrier, swarm
        self.me = identity.peer_id
        self.directory = directory  # peer id -> carrier address (from announcements)
        self.store, self.on_version = store, on_version
        self.window, self.chunk_wait_s = window, chunk_wait_s
        self.request_timeout_s, self.stall_s = request_timeout_s, stall_s
        self.max_staleness = max_staleness  # a version in flight this far behind the newest is finished (fetch.py)
        self.check = ManifestCheck(swarm, follow) if follow else None
        self.held: collections.OrderedDict[bytes, Transfer] = collections.OrderedDict()
        self.applied: Manifest | None = None
        self.stats = BroadcastStats()
        self.suspects: dict[str, int] = {}  # peer -> the version it failed us in
        # async (peers) -> fills ``directory`` with their addresses (the follower's DHT reads)
        self.resolve: Callable[[list[str]], Awaitable[object]] | None = None
        self._tasks: set[asyncio.Task] = set()
        self.server = Server(self)
        self.fetcher = Fetcher(self)
        carrier.favoured = self.server.favoured

    # -- life cycle -----------------------------------------------------------------------------
    async def start(self) -> tuple[Manifest, bytes] | None:
        """Serve; for a follower with a store, resume: returns its last good version (to apply
        before anything else) and restarts the fetch of the pending one from the chunks on disk."""
        await self.carrier.start(self.server.handle)
        return await self.fetcher.resume()

    async def close(self) -> None:
        for t in list(self._tasks):
            t.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        await self.carrier.close()

    def spawn(self, coro) -> asyncio.Task:
        """A task of this node's, cancelled when it closes."""
        task = asyncio.ensure_future(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

    # -- source ---------------------------------------------------------------------------------
    async def publish(self, data: bytes, *, version: int, step: int, model_fingerprint: str,
                      tokenizer_fingerprint: str, format: str, relays: list[str], fanout: int = 1,
                      chunk_size: int | None = None,
                      before_offer: Callable[[Manifest], None] | None = None) -> Manifest:
        """Sign ``data`` as ``version`` and offer it down the tree; ``before_offer(manifest)`` runs
        first (the source records what it signed: if that fails, nothing is offered)."""
        chunk_size = chunk_size or choose_chunk_size(len(data))
        m = await asyncio.to_thread(build_manifest, data, self.identity, swarm=self.swarm, version=version,
                                    step=step, model_fingerprint=model_fingerprint,
                                    tokenizer_fingerprint=tokenizer_fingerprint, format=format,
                                    chunk_size=chunk_size, relays=relays, fanout=fanout)
        if before_offer is not None:
            before_offer(m)
        t = Transfer(m, data=bytes(data), finished=time.monotonic())
        t.done.set()
        self.hold(t)
        self.offer_down(m)
        return m

    # -- following (fetch.py) -------------------------------------------------------------------
    def offer(self, m: Manifest) -> bool:
        """A manifest from anyone: fetched if it is the followed source's and newer."""
        return self.fetcher.offer(m)

    async def ask_newest(self, peer: str) -> bool:
        """Ask ``peer`` for the newest manifest it holds of the followed source."""
        return await self.fetcher.ask_newest(peer)

    def take_manifest(self, body: bytes, digest: bytes) -> bool:
        """A manifest from the directory, taken only if it is the one the pointer names."""
        return self.fetcher.take_manifest(body, digest)

    async def ask_manifest(self, peer: str, digest: bytes) -> bool:
        """Fetch the manifest the source's DHT pointer names (by digest) from ``peer``."""
        return await self.fetcher.ask_manifest(peer, digest)

    # -- what it holds, and who hears of it -----------------------------------------------------
    def hold(self, t: Transfer) -> None:
        """Keep ``t`` as the newest version held; the oldest past the newest ``max_staleness`` + 1
        (a follower may still be finishing any of them), and at least HELD_VERSIONS, goes."""
        self.held[t.manifest.digest] = t
        self.held.move_to_end(t.manifest.digest)
        while len(self.held) > max(HELD_VERSIONS, self.max_staleness + 1):
            _, old = self.held.popitem(last=False)
            if old.task is not None:
                old.task.cancel()

    def offer_down(self, m: Manifest, only: set[str] | None = None) -> None:
        """Offer ``m`` to our children in its tree (those in ``only``, if given) whose addresses we have."""
        request = offer_request(m)
        for child in topology.children(m, self.me):
            if child in self.directory and (only is None or child in only):
                self.spawn(self.quiet_call(child, request))

    async def quiet_call(self, peer: str, request: bytes) -> None:
        """A request whose answer does not matter (an offer): a failure is only logged."""
        try:
            await self.carrier.call(self.directory[peer], request, max_reply=16, timeout=self.request_timeout_s)
        except CarrierError as e:
            log.debug("offer to %s failed: %s", peer, e)

    @property
    def newest_known(self) -> int | None:
        """The newest version held, or accepted and waiting its turn (fetch.py)."""
        versions = [t.manifest.version for t in self.held.values()]
        if self.fetcher.next is not None:
            versions.append(self.fetcher.next.version)
        return max(versions, default=None)

    def neighbours(self) -> list[str]:
        """The peers the newest held version ties us to: those that fetch from us first, then the
        nearest nodes above."""
        if not self.held:
            return []
        m = next(reversed(self.held.values())).manifest
        return [*self.fetchers(m), *topology.upstream(m, self.me)[:3]]

    def skipped(self, peer: str) -> bool:
        """Whether nobody fetches chunks from ``peer``: it is reached only through a circuit relay,
        which cuts a connection after about 128 KiB (docs/nat.md)."""
        return relayed(self.directory.get(peer, ""))

    def fetchers(self, m: Manifest) -> list[str]:
        """The listed nodes of ``m`` that ask us first (our children, and theirs below a skipped one)."""
        return topology.fetchers(m, self.me, self.skipped)

    # -- status ---------------------------------------------------------------------------------
    def status(self) -> dict:
        """For status.json and the live table: applied version, the transfer in flight, counts."""
        flight = None
        for t in reversed(self.held.values()):
            if not t.done.is_set() and not t.abandoned:
                got = sum(len(c) for c in t.chunks.values())
                flight = {"version": t.manifest.version, "bytes": got, "total": t.manifest.total_size,
                          "from": dict(t.from_peer)}
                break
        return {
            "applied_version": self.applied.version if self.applied else None,
            "newest_seen": self.newest_known, "transfer": flight,
            "next_version": self.fetcher.next.version if self.fetcher.next is not None else None,
            "bad_chunks": dict(self.stats.bad_chunks), "failed_requests": dict(self.stats.failed_requests),
            "fallbacks": self.stats.fallbacks, "served_bytes": self.stats.served_bytes,
            "turned_away": self.stats.turned_away, "over_budget": self.stats.over_budget,
            "refused_streams": self.carrier.refused_streams, "resumed_chunks": self.stats.resumed_chunks,
            "manifests_refused": dict(self.check.refused) if self.check else {},
            "versions_completed": self.stats.versions_completed,
            "versions_abandoned": self.stats.versions_abandoned,
        }
