"""One node's part in the weight broadcast: it serves what it holds and fetches what it follows.

A *source* (``publish``) signs a manifest for a version's bytes and offers it to its children
in the relay topology (node/broadcast/topology.py). A *follower* that accepts a manifest
(signed by the source it follows, newer than any it has: ``ManifestCheck``) offers it on to its
own children and fetches the chunks from its parent, ``window`` requests in flight, in chunk
order. A parent asked for a chunk it is still receiving waits for it (up to ``chunk_wait_s``)
instead of refusing, so every chunk moves down the chain as soon as the node above has verified
it: the pipelining. Every chunk is hashed against the manifest before it is kept, served or
used; a peer that serves a bad one is dropped for that version and counted, and the chunk is
fetched from the next node up (parent's parent ... source), as it is when a parent vanishes or
stalls. When every chunk is in, the whole is hashed once more and ``on_version`` gets it: the
caller applies it (never a partial version). Chunks and the pending manifest go to a
``ChunkStore`` as they arrive, so a restarted follower resumes where it stopped.

Requests (msgpack lists, through the carrier)::

    ["o", manifest bytes]      an offer: "this version exists"    -> OK
    ["m", digest]              the manifest named by its digest    -> OK + manifest | UNKNOWN
    ["n", source id]           newest manifest held of a source    -> OK + manifest | UNKNOWN
    ["c", digest, index]       a chunk                             -> OK + bytes | NOT_YET | UNKNOWN

What a stranger can do: offer manifests (each costs a signature check, only for the source we
follow) and ask for them, within a request budget per peer and one for everyone
(``MANIFEST_REQUESTS``); download what we hold through our upload cap, in a few serve slots
shared by everyone outside our own children; and keep a few requests open, within the carrier's
per-peer bound (node/transport/carrier.py; the peers the topology ties us to are served past the
overall one). A node above us that failed us is asked last for the next ``SUSPECT_VERSIONS``
versions, so a relay that stalls costs its children one stall, not one per version.
"""

from __future__ import annotations

import asyncio
import collections
import hashlib
import logging
import time
from dataclasses import dataclass, field
from typing import Awaitable, Callable

import msgpack

from node.broadcast import topology
from node.transport.ratelimit import TokenBucket
from node.transport.carrier import MAX_REQUEST, Carrier, CarrierError
from node.broadcast.store import ChunkStore
from protocol.errors import ProtocolError
from protocol.identity import Identity
from protocol.manifest import (MAX_MANIFEST_BYTES, Manifest, ManifestCheck, build_manifest,
                               choose_chunk_size, decode_manifest, encode_manifest)

log = logging.getLogger(__name__)

__all__ = ["BroadcastPeer", "OK", "NOT_YET", "UNKNOWN", "BAD_REQUEST"]

OK, NOT_YET, UNKNOWN, BAD_REQUEST, BUSY = 0, 1, 2, 3, 4
HELD_VERSIONS = 2  # versions a node keeps serving (the newest and the one before)
MAX_SERVES = 16  # replies being written at once
STRANGER_SERVES = 2  # ... of them to peers that are not our children in the version asked for
MANIFEST_REQUESTS = (2.0, 16.0)  # offers and manifest asks a second (and burst) from one peer ...
ALL_MANIFEST_REQUESTS = (32.0, 64.0)  # ... and from everyone
REMOTES_TRACKED = 1024  # per-peer budgets kept (the least recent go first)
SUSPECT_VERSIONS = 3  # versions a node that failed us is asked after the others
COUNTED_PEERS = 256  # peers a per-peer failure counter keeps (the most counted)


def _bump(counter: collections.Counter, peer: str) -> None:
    """Count one for ``peer``, keeping the counter to COUNTED_PEERS peers (ids are free)."""
    counter[peer] += 1
    if len(counter) > COUNTED_PEERS:
        for p, _ in counter.most_common()[COUNTED_PEERS // 2:]:
            del counter[p]


def _join_and_hash(parts: list[bytes]) -> tuple[bytes, bytes]:
    data = b"".join(parts)
    return data, hashlib.sha256(data).digest()


@dataclass
class Transfer:
    """One version this node holds or is receiving."""

    manifest: Manifest
    chunks: dict[int, bytes] = field(default_factory=dict)
    arrived: dict[int, asyncio.Event] = field(default_factory=dict)
    done: asyncio.Event = field(default_factory=asyncio.Event)
    data: bytes | None = None  # the whole, once complete (the source's from the start)
    started: float = field(default_factory=time.monotonic)
    finished: float | None = None
    bytes_in: int = 0
    from_peer: collections.Counter = field(default_factory=collections.Counter)  # chunks each peer served us
    dropped: set = field(default_factory=set)  # peers dropped for this version
    abandoned: bool = False  # a newer version replaced it before it completed
    task: asyncio.Task | None = None

    def event(self, i: int) -> asyncio.Event:
        return self.arrived.setdefault(i, asyncio.Event())

    def chunk(self, i: int) -> bytes | memoryview | None:
        if self.data is not None:
            m = self.manifest
            return memoryview(self.data)[i * m.chunk_size:i * m.chunk_size + m.chunk_sizes[i]]
        return self.chunks.get(i)


@dataclass
class BroadcastStats:
    bad_chunks: collections.Counter = field(default_factory=collections.Counter)  # peer -> bad chunks served
    failed_requests: collections.Counter = field(default_factory=collections.Counter)  # peer -> errors, stalls
    fallbacks: int = 0  # chunks fetched from a node above the parent (it failed or lied)
    served_bytes: int = 0
    served_chunks: int = 0
    turned_away: int = 0  # requests refused for lack of a serve slot
    over_budget: int = 0  # manifest offers and asks refused past a request budget
    resumed_chunks: int = 0  # chunks found on disk at a restart
    versions_completed: int = 0


class BroadcastPeer:
    """Serves held versions; with ``follow`` set, fetches and hands over the source's new ones."""

    def __init__(self, identity: Identity, carrier: Carrier, *, swarm: str,
                 directory: dict[str, str], follow: str | None = None, store: ChunkStore | None = None,
                 on_version: Callable[[Manifest, bytes], Awaitable[None]] | None = None,
                 window: int = 4, chunk_wait_s: float = 5.0, request_timeout_s: float = 20.0,
                 stall_s: float = 20.0):
        self.identity, self.carrier, self.swarm = identity, carrier, swarm
        self.me = identity.peer_id
        self.directory = directory  # peer id -> carrier address (from announcements)
        self.store, self.on_version = store, on_version
        self.window, self.chunk_wait_s = window, chunk_wait_s
        self.request_timeout_s, self.stall_s = request_timeout_s, stall_s
        self.check = ManifestCheck(swarm, follow) if follow else None
        self.held: collections.OrderedDict[bytes, Transfer] = collections.OrderedDict()
        self.applied: Manifest | None = None
        self.stats = BroadcastStats()
        self._serves = asyncio.Semaphore(MAX_SERVES)
        self._stranger_serves = asyncio.Semaphore(STRANGER_SERVES)
        self._budgets: collections.OrderedDict[str, TokenBucket] = collections.OrderedDict()
        self._all_budget = TokenBucket(*ALL_MANIFEST_REQUESTS)
        self.suspects: dict[str, int] = {}  # peer -> the version it failed us in
        self._favoured_memo: tuple = ((), 0, frozenset())  # (held digests, directory's hash, remote ids)
        # async (peers) -> fills ``directory`` with their addresses (the follower's DHT reads)
        self.resolve: Callable[[list[str]], Awaitable[object]] | None = None
        self._tasks: set[asyncio.Task] = set()
        self._closed = False
        carrier.favoured = self._favoured

    # -- life cycle -----------------------------------------------------------------------------
    async def start(self) -> tuple[Manifest, bytes] | None:
        """Serve; for a follower with a store, resume: returns its last good version (to apply
        before anything else) and restarts the fetch of the pending one from the chunks on disk."""
        await self.carrier.start(self._handle)
        if self.store is None or self.check is None:
            return None
        last_good = None
        applied = self.store.load_manifest("applied")
        if applied is not None and applied.source == self.check.source:
            data = await asyncio.to_thread(self._assemble_from_store, applied)
            if data is not None:
                self.applied, last_good = applied, (applied, data)
                self.check.newest = applied.version
                t = Transfer(applied, data=data, finished=time.monotonic())
                t.done.set()
                self._hold(t)
        pending = self.store.load_manifest("pending")
        if pending is not None and self.check.accept(pending):
            self._begin(pending, resumed=True)
        return last_good

    async def close(self) -> None:
        self._closed = True
        for t in list(self._tasks):
            t.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        await self.carrier.close()

    def _spawn(self, coro) -> asyncio.Task:
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
        self._hold(t)
        self._offer_down(m)
        return m

    # -- following ------------------------------------------------------------------------------
    def offer(self, m: Manifest) -> bool:
        """A manifest from anyone: fetched if it is the followed source's and newer."""
        if self.check is None:
            return False
        if m.version == self.check.newest and m.source == self.check.source:
            return False  # the version it has, offered again (by its parent and its pointer): no news
        if m.source != self.check.source or m.version < self.check.newest:
            # counted without hashing 0.7 MB of someone's manifest
            reason = "not_followed_source" if m.source != self.check.source else "old_version"
            self.check.refused[reason] = self.check.refused.get(reason, 0) + 1
            return False
        if m.digest in self.held or not self.check.accept(m):
            return False
        self._begin(m)
        return True

    async def ask_newest(self, peer: str) -> bool:
        """Ask ``peer`` for the newest manifest it holds of the followed source (for a follower
        that missed an offer: it joined late, or was down)."""
        if self.check is None or peer not in self.directory:
            return False
        try:
            status, body = await asyncio.wait_for(
                self.carrier.call(self.directory[peer], msgpack.packb(["n", self.check.source]),
                                  max_reply=MAX_MANIFEST_BYTES, timeout=self.request_timeout_s),
                2 * self.request_timeout_s)
            return status == OK and self.offer(decode_manifest(body))
        except (CarrierError, ProtocolError, asyncio.TimeoutError):
            return False

    def take_manifest(self, body: bytes, digest: bytes) -> bool:
        """A manifest from the directory (a broker's retained copy): taken only if it is the one the
        pointer names (``digest``), then checked as any offer."""
        if self.check is None:
            return False
        try:
            m = decode_manifest(body)
        except ProtocolError:
            return False
        return m.digest == digest and self.offer(m)

    async def ask_manifest(self, peer: str, digest: bytes) -> bool:
        """Fetch the manifest the source's DHT pointer names (by digest) from ``peer``: a peer that
        only claims to hold the newest version cannot hand over an older signed one instead."""
        if self.check is None or peer not in self.directory:
            return False
        try:
            status, body = await asyncio.wait_for(
                self.carrier.call(self.directory[peer], msgpack.packb(["m", digest]), max_reply=MAX_MANIFEST_BYTES,
                                  timeout=self.request_timeout_s), 2 * self.request_timeout_s)
            if status != OK:
                return False
            return self.take_manifest(body, digest)
        except (CarrierError, asyncio.TimeoutError):
            return False

    def _begin(self, m: Manifest, resumed: bool = False) -> None:
        for old in self.held.values():  # a newer version replaces one still in flight
            if old.data is None and old.task is not None and not old.done.is_set():
                old.abandoned = True
                old.task.cancel()
        t = Transfer(m)
        self._hold(t)
        t.task = self._spawn(self._receive_logged(t, resumed))
        if self.store is not None:
            try:
                self.store.save_manifest("pending", m)
            except OSError as e:  # a full disk: the transfer goes on, it just cannot resume
                log.warning("could not save the pending manifest: %s", e)

    def _hold(self, t: Transfer) -> None:
        self.held[t.manifest.digest] = t
        self.held.move_to_end(t.manifest.digest)
        while len(self.held) > HELD_VERSIONS:
            _, old = self.held.popitem(last=False)
            if old.task is not None:
                old.task.cancel()

    def _offer_down(self, m: Manifest, only: set[str] | None = None) -> None:
        request = msgpack.packb(["o", encode_manifest(m)])
        for child in topology.children(m, self.me):
            if child in self.directory and (only is None or child in only):
                self._spawn(self._quiet_call(child, request))

    async def _quiet_call(self, peer: str, request: bytes) -> None:
        try:
            await self.carrier.call(self.directory[peer], request, max_reply=16, timeout=self.request_timeout_s)
        except CarrierError as e:
            log.debug("offer to %s failed: %s", peer, e)

    async def _receive_logged(self, t: Transfer, resumed: bool) -> None:
        try:
            await self._receive(t, resumed)
        except asyncio.CancelledError:
            raise
        except Exception:  # a bug or a full disk: say so; the last good version stays
            log.exception("receiving version %d of %s failed", t.manifest.version, t.manifest.source)

    def neighbours(self) -> list[str]:
        """The peers the newest held version ties us to: children, then the nearest nodes above."""
        if not self.held:
            return []
        m = next(reversed(self.held.values())).manifest
        return [*topology.children(m, self.me), *topology.upstream(m, self.me)[:3]]

    def _remote_ids(self, peers) -> set[str]:
        ids = set()
        for peer in peers:
            try:
                ids.add(self.carrier.remote_id(self.directory[peer]))
            except (KeyError, CarrierError):  # not announced, or an address that is no address
                continue
        return ids

    def _favoured(self, remote: str) -> bool:
        """Whether ``remote`` is a node the versions we hold list (their source and relays: a
        parent of the next version, a child falling back to us) or one of our neighbours: those
        are served past the shared bounds, so a crowd of fresh ids cannot shut them out."""
        # asked only under pressure (the shared bounds are spent): worth a memo, keyed so that an
        # address that changed (a relay restarted on a new port) is seen
        key = (tuple(self.held), hash(frozenset(self.directory.items())))
        if self._favoured_memo[:2] != key:
            peers = {p for t in self.held.values() for p in (t.manifest.source, *t.manifest.relays)}
            if self.check is not None:
                peers.add(self.check.source)
            self._favoured_memo = (*key, frozenset(self._remote_ids(peers | set(self.neighbours()))))
        return remote in self._favoured_memo[2]

    def _allowed(self, remote: str, offered: Manifest | None = None) -> bool:
        """Within the manifest-request budgets (per peer, and everyone's; a favoured peer, or the
        sender of an offer that names it our parent, is not held to everyone's)."""
        bucket = self._budgets.get(remote)
        if bucket is None:
            bucket = self._budgets[remote] = TokenBucket(*MANIFEST_REQUESTS)
            if len(self._budgets) > REMOTES_TRACKED:
                self._budgets.popitem(last=False)
        self._budgets.move_to_end(remote)
        # one peer cannot spend everyone's budget; many fresh ones can, except for our neighbours'
        if bucket.try_take() and (self._all_budget.try_take() or self._favoured(remote) or (
                offered is not None and remote in self._remote_ids(topology.upstream(offered, self.me)[:2]))):
            return True
        self.stats.over_budget += 1
        return False

    async def _receive(self, t: Transfer, resumed: bool) -> None:
        m = t.manifest
        self._offer_down(m)  # to the children whose addresses we have: the news goes on at once
        wanted = [p for p in [*topology.children(m, self.me), *topology.upstream(m, self.me)]
                  if p not in self.directory and p != m.source]
        if wanted and self.resolve is not None:  # addresses of the other peers this version ties us to
            try:
                await self.resolve(wanted)
            except Exception as e:  # noqa: BLE001 - a DHT hiccup: the fetch falls back on whom we know
                log.info("looking up the relays of version %d: %s: %s", m.version, type(e).__name__, e)
            self._offer_down(m, only=set(wanted))
        self.suspects = {p: v for p, v in self.suspects.items() if m.version - v < SUSPECT_VERSIONS}
        if self.store is not None:  # what an earlier run (or an older version) already got
            found = await asyncio.to_thread(self._chunks_on_disk, m)
            for i, data in found.items():
                self._keep(t, i, data, peer=None)
            if resumed:
                self.stats.resumed_chunks += len(found)
        todo = collections.deque(i for i in range(m.n_chunks) if i not in t.chunks)
        async with asyncio.TaskGroup() as tg:  # one failing cancels the others: no orphan downloads
            for _ in range(self.window):
                tg.create_task(self._fetch_worker(t, todo))
        data, digest = await asyncio.to_thread(_join_and_hash, [t.chunks[i] for i in range(m.n_chunks)])
        if digest != m.total_sha256:  # chunks all verified: a lying source
            log.warning("version %d of %s: the whole does not match its signed hash", m.version, m.source)
            return
        t.data, t.chunks, t.finished = data, {}, time.monotonic()
        t.done.set()
        self.stats.versions_completed += 1
        if self.on_version is not None:
            try:
                await self.on_version(m, data)
            except Exception:  # the caller could not apply it: it keeps its last good version
                log.exception("applying version %d failed; keeping version %s", m.version,
                              self.applied.version if self.applied else None)
                return
        self.applied = m
        if self.store is not None:
            self.store.save_manifest("applied", m)
            if self.store.load_manifest("pending") == m:
                self.store.drop_manifest("pending")
            keep = [m] + [x.manifest for x in self.held.values() if not x.done.is_set()]
            await asyncio.to_thread(self.store.prune, keep)

    async def _fetch_worker(self, t: Transfer, todo: collections.deque) -> None:
        while todo:
            i = todo.popleft()
            await self._fetch_chunk(t, i)

    async def _fetch_chunk(self, t: Transfer, i: int) -> None:
        m = t.manifest
        parent = topology.upstream(m, self.me)[0]
        while True:
            holders = [p for p in topology.upstream(m, self.me) if p not in t.dropped and p in self.directory]
            holders.sort(key=lambda p: p in self.suspects)  # (stable: the tree's order otherwise)
            if not holders:
                # Everyone above us failed this version: start over from the parent (a dead relay
                # may be back, a stall may have cleared) after a pause, rather than give up.
                t.dropped.clear()
                await asyncio.sleep(self.chunk_wait_s)
                continue
            peer = holders[0]
            try:
                status, body = await self._ask_chunk(t, peer, i)
            except CarrierError as e:
                _bump(self.stats.failed_requests, peer)
                self._drop(t, peer)
                log.info("chunk %d of version %d: %s failed (%s); asking the next node up", i, m.version, peer, e)
                continue
            if status == OK and await asyncio.to_thread(m.chunk_ok, i, body):
                if peer != parent:
                    self.stats.fallbacks += 1
                self._keep(t, i, body, peer)
                if self.store is not None:
                    try:
                        await asyncio.to_thread(self.store.put, m.chunk_hashes[i], body)
                    except OSError as e:  # not persisted: a restart fetches it again
                        log.warning("could not store chunk %d of version %d: %s", i, m.version, e)
                return
            if status == OK:  # it served bytes that are not the signed chunk
                _bump(self.stats.bad_chunks, peer)
                log.warning("chunk %d of version %d from %s does not match the manifest: dropped for this "
                            "version", i, m.version, peer)
            else:  # stalled past stall_s, or it does not hold the version even after our offer
                _bump(self.stats.failed_requests, peer)
            self._drop(t, peer)

    def _drop(self, t: Transfer, peer: str) -> None:
        t.dropped.add(peer)
        if peer != t.manifest.source:
            self.suspects[peer] = t.manifest.version

    async def _ask_chunk(self, t: Transfer, peer: str, i: int) -> tuple[int, bytes]:
        """Ask until ``peer`` answers with bytes, or for stall_s. NOT_YET and BUSY mean alive
        (receiving the version itself, or serving others): ask again. UNKNOWN once: it has not
        heard of the version (the offer went another way): offer it the manifest, then ask again."""
        request = msgpack.packb(["c", t.manifest.digest, i])
        since, offered = time.monotonic(), False
        while True:
            asked = time.monotonic()
            status, body = await self.carrier.call(self.directory[peer], request,
                                                   max_reply=t.manifest.chunk_sizes[i], timeout=self.request_timeout_s)
            if status == UNKNOWN and not offered:
                offered = True
                await self._quiet_call(peer, msgpack.packb(["o", encode_manifest(t.manifest)]))
                continue
            if status not in (NOT_YET, BUSY) or time.monotonic() - since > self.stall_s:
                return status, body
            if status == BUSY or time.monotonic() - asked < self.chunk_wait_s / 2:
                await asyncio.sleep(0.1)  # an instant NOT_YET did not wait for the chunk: do not hammer

    def _keep(self, t: Transfer, i: int, data: bytes, peer: str | None) -> None:
        t.chunks[i] = data
        t.bytes_in += len(data) if peer is not None else 0
        if peer is not None:
            t.from_peer[peer] += 1
        t.event(i).set()

    def _chunks_on_disk(self, m: Manifest) -> dict[int, bytes]:
        found = {}
        for i, h in enumerate(m.chunk_hashes):
            data = self.store.get(h)
            if data is not None:
                found[i] = data
        return found

    def _assemble_from_store(self, m: Manifest) -> bytes | None:
        found = self._chunks_on_disk(m)
        if len(found) != m.n_chunks:
            return None
        data = b"".join(found[i] for i in range(m.n_chunks))
        return data if hashlib.sha256(data).digest() == m.total_sha256 else None

    # -- serving --------------------------------------------------------------------------------
    async def _handle(self, remote: str, request: bytes) -> tuple[int, bytes | memoryview]:
        if len(request) > MAX_REQUEST:
            return BAD_REQUEST, b""
        try:
            req = msgpack.unpackb(request, raw=False, max_bin_len=MAX_MANIFEST_BYTES, max_array_len=4,
                                  max_map_len=0, max_ext_len=0)
            kind = req[0]
        except Exception:  # hostile bytes: any msgpack failure is a bad request
            return BAD_REQUEST, b""
        if kind in ("m", "n") and not self._allowed(remote):
            return BUSY, b""
        if kind == "o" and len(req) == 2 and type(req[1]) is bytes:
            try:
                m = decode_manifest(req[1])  # (parsing is cheap; the signature is checked in offer)
            except ProtocolError:
                return BAD_REQUEST, b""
            if not self._allowed(remote, offered=m):
                return BUSY, b""
            self.offer(m)
            return OK, b""
        if kind == "m" and len(req) == 2 and type(req[1]) is bytes:
            t = self.held.get(req[1])
            return (OK, encode_manifest(t.manifest)) if t is not None else (UNKNOWN, b"")
        if kind == "n" and len(req) == 2 and type(req[1]) is str:
            mine = [t for t in self.held.values() if t.manifest.source == req[1]]
            if not mine:
                return UNKNOWN, b""
            return OK, encode_manifest(max(mine, key=lambda t: t.manifest.version).manifest)
        if kind == "c" and len(req) == 3 and type(req[1]) is bytes and type(req[2]) is int:
            return await self._serve_chunk(remote, req[1], req[2])
        return BAD_REQUEST, b""

    async def _serve_chunk(self, remote: str, digest: bytes, i: int):
        """A chunk, with a release callback the carrier calls once the reply is written: the serve
        slots bound the uploads themselves, not just the waits before them."""
        t = self.held.get(digest)
        if t is None or not 0 <= i < t.manifest.n_chunks:
            return UNKNOWN, b""
        # Our children wait for a slot; everyone else shares a few and is turned away when they
        # are taken (they may ask again, or ask the node the topology gave them).
        stranger = remote not in self._remote_ids(topology.children(t.manifest, self.me))
        if stranger and self._stranger_serves.locked():
            self.stats.turned_away += 1
            return BUSY, b""
        await self._serves.acquire()
        if stranger:
            await self._stranger_serves.acquire()

        def release() -> None:
            self._serves.release()
            if stranger:
                self._stranger_serves.release()

        try:
            data = t.chunk(i)
            if data is None and not t.abandoned:
                try:
                    await asyncio.wait_for(t.event(i).wait(), self.chunk_wait_s)
                except asyncio.TimeoutError:
                    release()
                    return NOT_YET, b""
                data = t.chunk(i)
        except BaseException:
            release()
            raise
        if data is None:
            release()
            return UNKNOWN, b""
        self.stats.served_chunks += 1
        self.stats.served_bytes += len(data)
        # A copy of the chunk, not a view: a slow reader must not pin a whole evicted version. A
        # stranger's upload yields to our children's (the chain below us is not slowed by leaves).
        return OK, bytes(data), release, stranger

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
        newest = max((t.manifest.version for t in self.held.values()), default=None)
        return {
            "applied_version": self.applied.version if self.applied else None,
            "newest_seen": newest, "transfer": flight,
            "bad_chunks": dict(self.stats.bad_chunks), "failed_requests": dict(self.stats.failed_requests),
            "fallbacks": self.stats.fallbacks, "served_bytes": self.stats.served_bytes,
            "turned_away": self.stats.turned_away, "over_budget": self.stats.over_budget,
            "refused_streams": self.carrier.refused_streams, "resumed_chunks": self.stats.resumed_chunks,
            "manifests_refused": dict(self.check.refused) if self.check else {},
            "versions_completed": self.stats.versions_completed,
        }
