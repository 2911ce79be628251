"""Fetching: how a follower takes a new version of the source it follows, chunk by verified chunk.

A follower that accepts a manifest (signed by the source it follows, newer than any it has:
``ManifestCheck``) offers it on to its own children and fetches the chunks from its parent,
``window`` requests in flight, in chunk order. Every chunk is hashed against the manifest before
it is kept, served or used; a peer that serves a bad one is dropped for that version and counted,
and the chunk is fetched from the next node up (parent's parent ... source), as it is when a
parent vanishes or stalls. A node above us that failed us is asked last for the next
``SUSPECT_VERSIONS`` versions, so a relay that stalls costs its children one stall, not one per
version; one reached only through a circuit relay (behind NAT) is asked after every direct
one, and the direct node asked first serves its children as its own (``fetchers``). When every
chunk is in, the whole is hashed once more and ``on_version`` gets it: the caller applies it
(never a partial version). Chunks and the pending manifest go to the node's
``ChunkStore`` as they arrive, so a restarted follower resumes where it stopped.

Which version (``version_to_fetch``): a newer manifest does not cancel the version in flight
while that one is within ``max_staleness`` of it; it is remembered as the next, fetched once the
one in flight is done (a newer one still replaces it). Only when the version in flight falls out
of the bound does the follower jump, and then to the newest: on a link slower than the source
publishes, it still finishes versions instead of starting each one over. The store then keeps
the last applied version and the one in flight: an abandoned version's chunks go at once.
"""

from __future__ import annotations

import asyncio
import collections
import hashlib
import logging
import time
from typing import TYPE_CHECKING

from swarm_node.node.broadcast import topology
from swarm_node.node.broadcast.transfer import Transfer
from swarm_node.node.broadcast.wire import (BUSY, NOT_YET, OK, UNKNOWN, chunk_request, manifest_request, newest_request,
                                 offer_request)
from swarm_node.node.transport.carrier import CarrierError
from swarm_node.protocol.errors import ProtocolError
from swarm_node.protocol.manifest import MAX_MANIFEST_BYTES, Manifest, decode_manifest

if TYPE_CHECKING:
    from swarm_node.node.broadcast.peer import BroadcastPeer

log = logging.getLogger("swarm_node.node.broadcast.peer")  # the broadcast log name, as before the split

SUSPECT_VERSIONS = 3  # versions a node that failed us is asked after the others
COUNTED_PEERS = 256  # peers a per-peer failure counter keeps (the most counted)


def bump(counter: collections.Counter, peer: str) -> None:
    """Count one for ``peer``, keeping the counter to COUNTED_PEERS peers (ids are free)."""
    counter[peer] += 1
    if len(counter) > COUNTED_PEERS:
        for p, _ in counter.most_common()[COUNTED_PEERS // 2:]:
            del counter[p]


def version_to_fetch(in_flight: int | None, newest: int, max_staleness: int) -> int:
    """The version a follower fetches now: the one ``in_flight`` (None: none) while the newest
    accepted is at most ``max_staleness`` ahead of it, the ``newest`` otherwise."""
    if in_flight is not None and newest - in_flight <= max_staleness:
        return in_flight
    return newest


def join_and_hash(parts: list[bytes]) -> tuple[bytes, bytes]:
    data = b"".join(parts)
    return data, hashlib.sha256(data).digest()


class Fetcher:
    """Takes the followed source's new versions into ``node``: decides which manifests to follow,
    fetches and verifies their chunks, and hands each whole version to ``node.on_version``."""

    def __init__(self, node: BroadcastPeer):
        self.node = node
        self.next: Manifest | None = None  # accepted while another was in flight: fetched after it

    def in_flight(self) -> Transfer | None:
        """The version being fetched: its task runs and no newer one replaced it."""
        for t in reversed(self.node.held.values()):
            if t.task is not None and not t.task.done() and not t.abandoned:
                return t
        return None

    # -- which versions ------------------------------------------------------------------------
    def offer(self, m: Manifest) -> bool:
        """A manifest from anyone: fetched if it is the followed source's and newer."""
        check = self.node.check
        if check is None:
            return False
        if m.version == check.newest and m.source == check.source:
            return False  # the version it has, offered again (by its parent and its pointer): no news
        if m.source != check.source or m.version < check.newest:
            # counted without hashing 0.7 MB of someone's manifest
            reason = "not_followed_source" if m.source != check.source else "old_version"
            check.refused[reason] = check.refused.get(reason, 0) + 1
            return False
        if m.digest in self.node.held or not check.accept(m):
            return False
        t = self.in_flight()
        if t is not None and (t.done.is_set() or version_to_fetch(t.manifest.version, m.version,
                                                                  self.node.max_staleness) == t.manifest.version):
            self.next = m  # the one in flight is fresh enough (or whole, being applied): finish it first
            self.node.offer_down(m)  # (our children go above us for it until we have it)
        else:
            self.begin(m)
        return True

    async def ask_newest(self, peer: str) -> bool:
        """Ask ``peer`` for the newest manifest it holds of the followed source (for a follower
        that missed an offer: it joined late, or was down)."""
        node = self.node
        if node.check is None or peer not in node.directory:
            return False
        try:
            status, body = await asyncio.wait_for(
                node.carrier.call(node.directory[peer], newest_request(node.check.source),
                                  max_reply=MAX_MANIFEST_BYTES, timeout=node.request_timeout_s),
                2 * node.request_timeout_s)
            return status == OK and self.offer(decode_manifest(body))
        except (CarrierError, ProtocolError, asyncio.TimeoutError):
            return False

    def take_manifest(self, body: bytes, digest: bytes) -> bool:
        """A manifest from the directory (a broker's retained copy): taken only if it is the one the
        pointer names (``digest``), then checked as any offer."""
        if self.node.check is None:
            return False
        try:
            m = decode_manifest(body)
        except ProtocolError:
            return False
        return m.digest == digest and self.offer(m)

    async def ask_manifest(self, peer: str, digest: bytes) -> bool:
        """Fetch the manifest the source's DHT pointer names (by digest) from ``peer``: a peer that
        only claims to hold the newest version cannot hand over an older signed one instead."""
        node = self.node
        if node.check is None or peer not in node.directory:
            return False
        try:
            status, body = await asyncio.wait_for(
                node.carrier.call(node.directory[peer], manifest_request(digest), max_reply=MAX_MANIFEST_BYTES,
                                  timeout=node.request_timeout_s), 2 * node.request_timeout_s)
            if status != OK:
                return False
            return self.take_manifest(body, digest)
        except (CarrierError, asyncio.TimeoutError):
            return False

    async def resume(self) -> tuple[Manifest, bytes] | None:
        """For a follower with a store: its last good version (to apply before anything else),
        held again; and the fetch of the pending one restarted from the chunks on disk."""
        node = self.node
        if node.store is None or node.check is None:
            return None
        last_good = None
        applied = node.store.load_manifest("applied")
        if applied is not None and applied.source == node.check.source:
            data = await asyncio.to_thread(self._assemble_from_store, applied)
            if data is not None:
                node.applied, last_good = applied, (applied, data)
                node.check.newest = applied.version
                t = Transfer(applied, data=data, finished=time.monotonic())
                t.done.set()
                node.hold(t)
        pending = node.store.load_manifest("pending")
        if pending is not None and node.check.accept(pending):
            self.begin(pending, resumed=True)
        return last_good

    def begin(self, m: Manifest, resumed: bool = False) -> None:
        node = self.node
        for old in list(node.held.values()):  # a newer version replaces one still in flight
            if old.data is None and old.task is not None and not old.done.is_set():
                if not old.task.done():
                    node.stats.versions_abandoned += 1
                old.abandoned = True
                old.task.cancel()
                del node.held[old.manifest.digest]  # (the last applied stays held, for children still on it)
        if self.next is not None and self.next.version <= m.version:
            self.next = None
        t = Transfer(m)
        node.hold(t)
        t.task = node.spawn(self._receive_logged(t, resumed))
        if node.store is not None:
            try:
                node.store.save_manifest("pending", m)
            except OSError as e:  # a full disk: the transfer goes on, it just cannot resume
                log.warning("could not save the pending manifest: %s", e)

    # -- one version ---------------------------------------------------------------------------
    async def _receive_logged(self, t: Transfer, resumed: bool) -> None:
        try:
            await self._receive(t, resumed)
        except asyncio.CancelledError:
            raise
        except Exception:  # a bug or a full disk: say so; the last good version stays
            log.exception("receiving version %d of %s failed", t.manifest.version, t.manifest.source)
        nxt, self.next = self.next, None  # done (applied or not): on to the newest accepted meanwhile
        if nxt is not None and nxt.version > t.manifest.version and nxt.digest not in self.node.held:
            self.begin(nxt)

    async def _receive(self, t: Transfer, resumed: bool) -> None:
        node, m = self.node, t.manifest
        node.offer_down(m)  # to the children whose addresses we have: the news goes on at once
        wanted = [p for p in [*node.fetchers(m), *topology.upstream(m, node.me)]
                  if p not in node.directory and p != m.source]
        if wanted and node.resolve is not None:  # addresses of the other peers this version ties us to
            try:
                await node.resolve(wanted)
            except Exception as e:  # noqa: BLE001 - a DHT hiccup: the fetch falls back on whom we know
                log.info("looking up the relays of version %d: %s: %s", m.version, type(e).__name__, e)
            node.offer_down(m, only=set(wanted))
        node.suspects = {p: v for p, v in node.suspects.items() if m.version - v < SUSPECT_VERSIONS}
        if node.store is not None:  # on disk: the last good version and this one (abandoned ones go)
            await asyncio.to_thread(node.store.prune, [x for x in (node.applied, m) if x is not None])
            # what an earlier run (or an older version) already got
            found = await asyncio.to_thread(self._chunks_on_disk, m)
            for i, data in found.items():
                self._keep(t, i, data, peer=None)
            if resumed:
                node.stats.resumed_chunks += len(found)
        todo = collections.deque(i for i in range(m.n_chunks) if i not in t.chunks)
        async with asyncio.TaskGroup() as tg:  # one failing cancels the others: no orphan downloads
            for _ in range(node.window):
                tg.create_task(self._fetch_worker(t, todo))
        data, digest = await asyncio.to_thread(join_and_hash, [t.chunks[i] for i in range(m.n_chunks)])
        if digest != m.total_sha256:  # chunks all verified: a lying source
            log.warning("version %d of %s: the whole does not match its signed hash", m.version, m.source)
            return
        t.data, t.chunks, t.finished = data, {}, time.monotonic()
        t.done.set()
        node.stats.versions_completed += 1
        if node.on_version is not None:
            try:
                await node.on_version(m, data)
            except Exception:  # the caller could not apply it: it keeps its last good version
                log.exception("applying version %d failed; keeping version %s", m.version,
                              node.applied.version if node.applied else None)
                return
        node.applied = m
        if node.store is not None:
            node.store.save_manifest("applied", m)
            if node.store.load_manifest("pending") == m:
                node.store.drop_manifest("pending")
            await asyncio.to_thread(node.store.prune, [m])  # the next version's prune keeps it too

    async def _fetch_worker(self, t: Transfer, todo: collections.deque) -> None:
        while todo:
            i = todo.popleft()
            await self._fetch_chunk(t, i)

    # -- one chunk -----------------------------------------------------------------------------
    async def _fetch_chunk(self, t: Transfer, i: int) -> None:
        node, m = self.node, t.manifest
        parent = topology.upstream(m, node.me)[0]
        while True:
            holders = [p for p in topology.upstream(m, node.me) if p not in t.dropped and p in node.directory]
            # Last: a node above us that failed us lately, and one reached only through a relay (it
            # cuts a connection after ~128 KiB: docs/nat.md). Stable: the tree's order otherwise.
            holders.sort(key=lambda p: (node.skipped(p), p in node.suspects))
            if not holders:
                # Everyone above us failed this version: start over from the parent (a dead relay
                # may be back, a stall may have cleared) after a pause, rather than give up.
                t.dropped.clear()
                await asyncio.sleep(node.chunk_wait_s)
                continue
            peer = holders[0]
            try:
                status, body = await self._ask_chunk(t, peer, i)
            except CarrierError as e:
                bump(node.stats.failed_requests, peer)
                self._drop(t, peer)
                log.info("chunk %d of version %d: %s failed (%s); asking the next node up", i, m.version, peer, e)
                continue
            if status == OK and await asyncio.to_thread(m.chunk_ok, i, body):
                if peer != parent:
                    node.stats.fallbacks += 1
                self._keep(t, i, body, peer)
                if node.store is not None:
                    try:
                        await asyncio.to_thread(node.store.put, m.chunk_hashes[i], body)
                    except OSError as e:  # not persisted: a restart fetches it again
                        log.warning("could not store chunk %d of version %d: %s", i, m.version, e)
                return
            if status == OK:  # it served bytes that are not the signed chunk
                bump(node.stats.bad_chunks, peer)
                log.warning("chunk %d of version %d from %s does not match the manifest: dropped for this "
                            "version", i, m.version, peer)
            else:  # stalled past stall_s, or it does not hold the version even after our offer
                bump(node.stats.failed_requests, peer)
            self._drop(t, peer)

    def _drop(self, t: Transfer, peer: str) -> None:
        t.dropped.add(peer)
        if peer != t.manifest.source:
            self.node.suspects[peer] = t.manifest.version

    async def _ask_chunk(self, t: Transfer, peer: str, i: int) -> tuple[int, bytes]:
        """Ask until ``peer`` answers with bytes, or for stall_s. NOT_YET and BUSY mean alive
        (receiving the version itself, or serving others): ask again. UNKNOWN once: it has not
        heard of the version (the offer went another way): offer it the manifest, then ask again."""
        node = self.node
        request = chunk_request(t.manifest.digest, i)
        since, offered = time.monotonic(), False
        while True:
            asked = time.monotonic()
            status, body = await node.carrier.call(node.directory[peer], request,
                                                   max_reply=t.manifest.chunk_sizes[i], timeout=node.request_timeout_s)
            if status == UNKNOWN and not offered:
                offered = True
                await node.quiet_call(peer, offer_request(t.manifest))
                continue
            if status not in (NOT_YET, BUSY) or time.monotonic() - since > node.stall_s:
                return status, body
            if status == BUSY or time.monotonic() - asked < node.chunk_wait_s / 2:
                await asyncio.sleep(0.1)  # an instant NOT_YET did not wait for the chunk: do not hammer

    def _keep(self, t: Transfer, i: int, data: bytes, peer: str | None) -> None:
        t.chunks[i] = data
        t.bytes_in += len(data) if peer is not None else 0
        if peer is not None:
            t.from_peer[peer] += 1
        t.event(i).set()

    # -- the store -----------------------------------------------------------------------------
    def _chunks_on_disk(self, m: Manifest) -> dict[int, bytes]:
        found = {}
        for i, h in enumerate(m.chunk_hashes):
            data = self.node.store.get(h)
            if data is not None:
                found[i] = data
        return found

    def _assemble_from_store(self, m: Manifest) -> bytes | None:
        found = self._chunks_on_disk(m)
        if len(found) != m.n_chunks:
            return None
        data = b"".join(found[i] for i in range(m.n_chunks))
        return data if hashlib.sha256(data).digest() == m.total_sha256 else None
