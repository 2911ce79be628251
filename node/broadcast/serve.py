"""Serving: how a node answers the broadcast's requests (wire.py) from the versions it holds.

A parent asked for a chunk it is still receiving waits for it (up to ``chunk_wait_s``) instead
of refusing, so every chunk moves down the chain as soon as the node above has verified it: the
pipelining. What a stranger can do: offer manifests (each costs a signature check, only for the
source we follow) and ask for them, within a request budget per peer and one for everyone
(``MANIFEST_REQUESTS``); download what we hold through our upload cap, in a few serve slots
shared by everyone outside our own children; and keep a few requests open, within the carrier's
per-peer bound (node/transport/carrier.py; the peers the topology ties us to are served past the
overall one).
"""

from __future__ import annotations

import asyncio
import collections
from typing import TYPE_CHECKING

from swarm_node.node.broadcast import topology
from swarm_node.node.broadcast.wire import BAD_REQUEST, BUSY, NOT_YET, OK, UNKNOWN, parse_request
from swarm_node.node.transport.carrier import CarrierError
from swarm_node.node.transport.ratelimit import TokenBucket
from swarm_node.protocol.errors import ProtocolError
from swarm_node.protocol.manifest import Manifest, decode_manifest, encode_manifest

if TYPE_CHECKING:
    from swarm_node.node.broadcast.peer import BroadcastPeer

MAX_SERVES = 16  # replies being written at once
STRANGER_SERVES = 2  # ... of them to peers that are not our children in the version asked for
MANIFEST_REQUESTS = (2.0, 16.0)  # offers and manifest asks a second (and burst) from one peer ...
ALL_MANIFEST_REQUESTS = (32.0, 64.0)  # ... and from everyone
REMOTES_TRACKED = 1024  # per-peer budgets kept (the least recent go first)


class Server:
    """Answers other nodes' requests from what ``node`` holds; an offer goes to ``node.offer``."""

    def __init__(self, node: BroadcastPeer):
        self.node = node
        self._serves = asyncio.Semaphore(MAX_SERVES)
        self._stranger_serves = asyncio.Semaphore(STRANGER_SERVES)
        self._budgets: collections.OrderedDict[str, TokenBucket] = collections.OrderedDict()
        self._all_budget = TokenBucket(*ALL_MANIFEST_REQUESTS)
        self._favoured_memo: tuple = ((), 0, frozenset())  # (held digests, directory's hash, remote ids)
        self._fetchers_memo: tuple = (None, frozenset())  # ((fetcher, its address), ...), their remote ids

    async def handle(self, remote: str, request: bytes) -> tuple[int, bytes | memoryview]:
        """The carrier's handler: one request from ``remote`` (a carrier-level id), answered."""
        req = parse_request(request)
        if req is None:
            return BAD_REQUEST, b""
        kind = req[0]
        if kind in ("m", "n") and not self._allowed(remote):
            return BUSY, b""
        if kind == "o" and len(req) == 2 and type(req[1]) is bytes:
            try:
                m = decode_manifest(req[1])  # (parsing is cheap; the signature is checked in offer)
            except ProtocolError:
                return BAD_REQUEST, b""
            if not self._allowed(remote, offered=m):
                return BUSY, b""
            self.node.offer(m)
            return OK, b""
        if kind == "m" and len(req) == 2 and type(req[1]) is bytes:
            t = self.node.held.get(req[1])
            return (OK, encode_manifest(t.manifest)) if t is not None else (UNKNOWN, b"")
        if kind == "n" and len(req) == 2 and type(req[1]) is str:
            mine = [t for t in self.node.held.values() if t.manifest.source == req[1]]
            if not mine:
                return UNKNOWN, b""
            return OK, encode_manifest(max(mine, key=lambda t: t.manifest.version).manifest)
        if kind == "c" and len(req) == 3 and type(req[1]) is bytes and type(req[2]) is int:
            return await self._serve_chunk(remote, req[1], req[2])
        return BAD_REQUEST, b""

    async def _serve_chunk(self, remote: str, digest: bytes, i: int):
        """A chunk, with a release callback the carrier calls once the reply is written: the serve
        slots bound the uploads themselves, not just the waits before them."""
        node = self.node
        t = node.held.get(digest)
        if t is None or not 0 <= i < t.manifest.n_chunks:
            return UNKNOWN, b""
        # Our children (and theirs below one behind NAT, whom they skip) wait for a slot; everyone
        # else shares a few and is turned away when they are taken (they may ask again, or ask the
        # node the topology gave them).
        stranger = remote not in self._fetcher_ids(t.manifest)
        if stranger and self._stranger_serves.locked():
            node.stats.turned_away += 1
            return BUSY, b""
        await self._serves.acquire()
        if stranger:
            await self._stranger_serves.acquire()

        def release(written: int = 0) -> None:  # (the carrier says what went out: a slot is a slot)
            self._serves.release()
            if stranger:
                self._stranger_serves.release()

        try:
            data = t.chunk(i)
            if data is None and not t.abandoned:
                try:
                    await asyncio.wait_for(t.event(i).wait(), node.chunk_wait_s)
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
        node.stats.served_chunks += 1
        node.stats.served_bytes += len(data)
        # A copy of the chunk, not a view: a slow reader must not pin a whole evicted version. A
        # stranger's upload yields to our children's (the chain below us is not slowed by leaves).
        return OK, bytes(data), release, stranger

    def _fetcher_ids(self, m: Manifest) -> frozenset[str]:
        """The carrier-level ids of the nodes that ask us first for ``m``'s chunks. Asked at every
        chunk request: kept while those nodes and their addresses stay the same (usually one child),
        since turning an address into an id parses it."""
        key = tuple((p, self.node.directory.get(p)) for p in self.node.fetchers(m))
        if self._fetchers_memo[0] != key:
            self._fetchers_memo = (key, frozenset(self.remote_ids(p for p, _ in key)))
        return self._fetchers_memo[1]

    def remote_ids(self, peers) -> set[str]:
        """The carrier-level ids (what ``handle`` is told) of the peers we have addresses for."""
        ids = set()
        for peer in peers:
            try:
                ids.add(self.node.carrier.remote_id(self.node.directory[peer]))
            except (KeyError, CarrierError):  # not announced, or an address that is no address
                continue
        return ids

    def favoured(self, remote: str) -> bool:
        """Whether ``remote`` is a node the versions we hold list (their source and relays: a
        parent of the next version, a child falling back to us) or one of our neighbours: those
        are served past the shared bounds, so a crowd of fresh ids cannot shut them out."""
        node = self.node
        # asked only under pressure (the shared bounds are spent): worth a memo, keyed so that an
        # address that changed (a relay restarted on a new port) is seen
        key = (tuple(node.held), hash(frozenset(node.directory.items())))
        if self._favoured_memo[:2] != key:
            peers = {p for t in node.held.values() for p in (t.manifest.source, *t.manifest.relays)}
            if node.check is not None:
                peers.add(node.check.source)
            self._favoured_memo = (*key, frozenset(self.remote_ids(peers | set(node.neighbours()))))
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
        if bucket.try_take() and (self._all_budget.try_take() or self.favoured(remote) or (
                offered is not None and remote in self.remote_ids(topology.upstream(offered, self.node.me)[:2]))):
            return True
        self.node.stats.over_budget += 1
        return False
