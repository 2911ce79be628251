"""The hivemind transport: the public (or private) swarm over hivemind's Kademlia DHT.

Each node runs a ``hivemind.dht.DHTNode`` inside its own event loop (not the ``hivemind.DHT``
process wrapper: its pipe breaks on values above ~64 KB and its start blocks a thread). The DHT
holds only small index records, sharded so one read stays small at any swarm size
(node/transport/hivemind/index.py: the ladder of levels, the shard a peer writes, what a node reads);
envelope bodies travel over a libp2p stream from the publisher
(node/transport/hivemind/rollout_stream.py)::

    key     swarm-node/<swarm>/rollouts/<round>/<prefix>   a round's shard (prefix: "" or the first
                                                           1-3 hex digits of sha256(peer id))
    subkey  <peer id>                                      the publisher (sn1..., our Ed25519 id)
    value   {"k": <the key>, "p2p": <libp2p peer id>, "size": <bytes>, "sha256": <hex>}, owner-signed
    expires (max_round_lag + 2) round lengths after publishing; never later than 32 rounds after
            the round began (+ 60 s slack), the same bound on every node

    key     swarm-node/<swarm>/peers/<prefix>              heartbeats, same shards
    subkey  <peer id>
    value   {"k": <the key>, "hb": signed Announcement envelope (<= 8 KiB)}, owner-signed as a
            DHT record too (the envelope's signature does not cover expiry)

Owner-signed (node/transport/hivemind/records.py): the value travels with the publisher's Ed25519 key
and a signature over (key, subkey, value, expiration); every node and the bootstrap peer keep
only records their owner signed, so nobody can write, or outlive, another peer's entry.

A receiver reads the shards of the rounds in its window that still want envelopes, fetches about
what it will use (publishers with a verified history first, two unknown ones a round: the fetch
budget, ``poll``'s ``want``, node/transport/hivemind/fetch_budget.py) from the ``p2p`` peer,
skips an entry declaring more than the node could use (``max_size``) or than the message limit
(``oversized``), refuses a body framed larger than its entry declared *before* reading it and one
whose sha256 differs after (``hash_mismatch``; its publisher and host are then skipped for a
while: node/transport/hivemind/strikes.py), and hands the bytes to the node, which verifies the
signature. A publisher that does not answer (gone, or cut off mid-transfer) is retried on the
next polls, then given up (``fetch_failures``); that is routine churn, not a rejection.

Joining (node/transport/hivemind/daemon.py) retries with back-off and says what to check; with a
peer cache, each attempt tries the bootstraps and then the cached peers (node/transport/join.py).
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import random
from dataclasses import dataclass, field
from typing import Callable, Collection, Iterable, Optional

from hivemind.utils import get_dht_time

import swarm_node.node.transport.hivemind.patches  # noqa: F401  (hivemind's DHT, patched at import: see that module)
from swarm_node.node.observe.logs import adopt_library_logging
from swarm_node.node.transport.addresses import peer_id_of
from swarm_node.node.transport.backoff import JOIN_BACKOFF_S, JOIN_RETRIES
from swarm_node.node.transport.base import MAX_ANNOUNCEMENT_SIZE, MAX_ENVELOPE_SIZE, Delivery, Transport, TransportError
from swarm_node.node.transport.hivemind.bootstrap_watch import PERIOD_S, BootstrapWatch, log_if_failed
from swarm_node.node.transport.hivemind.daemon import start_dht_node, stop_dht_node
from swarm_node.node.transport.hivemind.dialback import serve_dialback
from swarm_node.node.transport.hivemind.fetcher import Fetcher
from swarm_node.node.transport.hivemind.heartbeats import HeardHeartbeats
from swarm_node.node.transport.hivemind.index import favoured, level_for, peers_key, read_plan, round_key, shard_prefix, write_levels
from swarm_node.node.transport.hivemind.index_records import heartbeat_entry, index_entry, shard_entries, swarm_validator
from swarm_node.node.transport.hivemind.known_shards import KnownShards
from swarm_node.node.transport.hivemind.nat import behind_nat_options
from swarm_node.node.transport.hivemind.rollout_stream import Outbox, ServesAnother, answer, download, handler_name
from swarm_node.node.transport.hivemind.serve_slots import ServeSlots
from swarm_node.node.transport.hivemind.size_estimate import next_estimate
from swarm_node.node.transport.join import PEER_CACHE, join_swarm
from swarm_node.protocol.identity import Identity

adopt_library_logging()  # JSON logs: hivemind's own handler gives way to the node's

log = logging.getLogger(__name__)

__all__ = ["HivemindTransport", "swarm_validator", "index_entry", "heartbeat_entry",
           ]

FETCH_WAIT_S = 1.0  # a poll returns what arrived by then; slower fetches are delivered by a later poll
HEARTBEATS_WANTED = 4  # heartbeat shards are read to find about twice this many peers


@dataclass
class HivemindTransport(Transport):
    initial_peers: list[str] = field(default_factory=list)
    host_maddrs: list[str] = field(default_factory=lambda: ["/ip4/127.0.0.1/tcp/0"])
    announce_maddrs: list[str] = field(default_factory=list)
    p2p_identity_path: Optional[str] = None
    startup_timeout: float = 30.0
    join_retries: int = JOIN_RETRIES
    join_backoff: float = JOIN_BACKOFF_S
    use_relay: bool = True
    nat_port_map: bool = True
    behind_nat: bool = False  # reached through the bootstrap peers' relay (node/transport/hivemind/nat.py)
    round_seconds: float = 5.0  # for the record validator (round expiry) and how often the index is read
    on_retry: Optional[Callable[[str], None]] = field(default=None, repr=False)  # join attempts, for status
    signer: Optional[Identity] = field(default=None, repr=False)  # signs our DHT records; its peer id is ours
    # Peers verified before (node/swarm/peer_cache.py): tried when no bootstrap answers (node/transport/join.py).
    fallback_peers: Optional[Callable[[], list[str]]] = field(default=None, repr=False)
    found_via: str = field(default="", init=False)  # bootstrap, peer cache or new swarm: how the last join found it
    bootstrap_check_s: float = PERIOD_S  # how often the bootstraps are looked for (node/transport/hivemind/bootstrap_watch.py)
    _watch: Optional[asyncio.Task] = field(default=None, init=False, repr=False)
    _bootstraps: Optional[BootstrapWatch] = field(default=None, init=False, repr=False)
    _node: object = field(default=None, init=False, repr=False)
    # serving our envelopes
    _outbox: Outbox = field(default_factory=Outbox, init=False, repr=False)
    _slots: ServeSlots = field(default_factory=ServeSlots, init=False, repr=False)  # downloads served at once
    # reading the index (fetching what it points at: node/transport/hivemind/fetcher.py)
    _fetcher: Fetcher = field(init=False, repr=False)
    _short: dict = field(default_factory=dict, init=False, repr=False)  # round -> last read found too few
    _polled: Optional[int] = field(default=None, init=False, repr=False)  # the newest round polled: ours
    _sizes: list = field(default_factory=list, init=False, repr=False)  # (round, level, entries) sampled, not folded yet
    _where: KnownShards = field(default_factory=KnownShards, init=False, repr=False)  # the level each known peer is at
    _rng: random.Random = field(default_factory=random.Random, init=False, repr=False)
    _heard: HeardHeartbeats = field(default_factory=HeardHeartbeats, init=False, repr=False)
    maddrs: list = field(default_factory=list, init=False)
    store_unconfirmed: int = field(default=0, init=False)
    refused_requests: int = field(default=0, init=False)  # fetches of ours naming another publisher
    swarm_size: float = field(default=1.0, init=False)  # peers, as estimated from the shards read
    index_bytes: int = field(default=0, init=False)  # index entries read (signed records, as sent)

    def __post_init__(self):
        self._fetcher = Fetcher(self.publisher, self.rejected)
        self._where.rng = self._rng  # one generator: a test that seeds ``_rng`` fixes the searches too

    # What fetching counted (the fetcher's): bodies given up on (peer gone, cut off), entries pointing
    # at a host that serves another publisher, back-offs of publishers whose bodies failed, bytes fetched.
    fetch_failures = property(lambda self: self._fetcher.fetch_failures)
    misdirected = property(lambda self: self._fetcher.misdirected)
    backed_off = property(lambda self: self._fetcher.backed_off)
    body_bytes = property(lambda self: self._fetcher.body_bytes)

    async def start(self, retries: int | None = None) -> None:
        if self.signer is None or self.signer.peer_id != self.publisher:
            raise TransportError("the hivemind transport needs the publisher's identity (signer) to sign "
                                 "its DHT records; its peer id must be the publisher")
        retries = self.join_retries if retries is None else retries
        # The bootstraps, then the peer cache: the decision every carrier that joins through peers shares.
        self._node, self.found_via = await join_swarm(self._join, self.initial_peers, self.fallback_peers, retries,
                                                      self.join_backoff, self.on_retry)
        try:
            await self._node.p2p.add_binary_stream_handler(handler_name(self.swarm), self._serve)
            await serve_dialback(self._node.p2p)  # any node may be named a bootstrap: it answers the doctor too
            self.maddrs = [str(m) for m in await self._node.p2p.get_visible_maddrs()]
            if self.initial_peers:  # a restarted bootstrap learns the swarm from its nodes
                own = getattr(self._node.p2p, "peer_id", None)  # this node, were it among its own bootstraps
                self._bootstraps = self._bootstraps or BootstrapWatch(self.initial_peers, self.bootstrap_check_s,
                                                                      own=own.to_base58() if own is not None else "")
                self._watch = asyncio.create_task(self._bootstraps.run(self._node, get_dht_time))
                self._watch.add_done_callback(log_if_failed)
        except BaseException:
            await self.close()
            raise
        log.info("hivemind transport up: %s", ", ".join(self.maddrs))
        if self.behind_nat and self.found_via == PEER_CACHE:
            log.warning("behind NAT this node is reached only through its bootstrap peers' relay, and no bootstrap "
                        "answered: peers cannot fetch its rollouts until one is back (or forward a port: docs/nat.md)")

    async def _join(self, initial_peers: list[str], retries: int):
        # Behind NAT the relays are the configured bootstraps even on a join through the peer cache:
        # a cached peer is a node, not a relay, and a circuit through it would lead nowhere.
        options = behind_nat_options(self.initial_peers, self.announce_maddrs) if self.behind_nat else None
        return await start_dht_node(
            initial_peers=initial_peers, host_maddrs=self.host_maddrs, p2p_options=options,
            announce_maddrs=self.announce_maddrs, identity_path=self.p2p_identity_path,
            startup_timeout=self.startup_timeout, retries=retries,
            backoff=self.join_backoff, use_relay=self.use_relay, nat_port_map=self.nat_port_map,
            record_validator=swarm_validator(self.swarm, self.round_seconds, self.signer),
            on_retry=self.on_retry)

    def alive(self) -> bool:
        # hivemind's P2P.is_alive() stays True when the daemon dies by itself: ask the process.
        child = getattr(getattr(self._node, "p2p", None), "_child", None)
        return self._node is not None and (child is None or child.returncode is None)

    async def restart(self) -> None:
        """A new DHT node and p2p daemon with the same p2p key (same address for peers); what
        this node has published and not yet seen expire is announced again."""
        await self._stop_watch()
        self._fetcher.cancel()
        node, self._node = self._node, None
        if node is not None:
            await stop_dht_node(node, timeout=2.0)
        await self.start(retries=0)  # the caller (node/swarm/link.py) owns the back-off between tries
        for r, data, left in self._outbox.unexpired(get_dht_time()):
            await self.publish(r, data, left)

    @property
    def p2p_peer_id(self) -> str:
        return self._node.p2p.peer_id.to_base58()

    @property
    def p2p(self):
        """The p2p daemon's client, for a request of the node's own (``swarm-node doctor``'s dial-back)."""
        return self._node.p2p

    # -- serving our envelopes (node/transport/hivemind/rollout_stream.py) ---------------------
    async def _serve(self, info, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        peer = str(info.peer_id)
        if not self._slots.take(peer):  # bounded, in all and per peer: node/transport/hivemind/serve_slots.py
            writer.close()
            return
        try:
            await answer(reader, writer, self.publisher, self._outbox, self._refused_request)
        except (asyncio.TimeoutError, asyncio.IncompleteReadError, ConnectionError) as e:
            log.debug("rollout request from %s failed: %s", peer, e)
        finally:
            self._slots.give(peer)
            writer.close()

    def _refused_request(self) -> None:
        self.refused_requests += 1

    async def publish(self, round: int, data: bytes, expires_in: float) -> None:
        await self.publish_as(self.publisher, round, data, expires_in)

    async def publish_as(self, publisher: str, round: int, data: bytes, expires_in: float) -> None:
        """Publish under ``publisher``'s subkey. Only our own is possible: another peer's index
        entry needs its owner's signature, and every validator refuses one without it (the
        adversary's replay attack ends here, as a raw client's write would)."""
        if publisher != self.publisher:
            raise PermissionError(f"cannot write {publisher}'s index entry: DHT records are owner-signed")
        if len(data) > MAX_ENVELOPE_SIZE:
            raise ValueError(f"envelope of {len(data)} bytes is over the {MAX_ENVELOPE_SIZE}-byte limit")
        now = get_dht_time()
        self._outbox.keep(round, data, now, expires_in)
        sha = hashlib.sha256(data).hexdigest()
        entries = [index_entry(self.swarm, round, publisher, self.p2p_peer_id, len(data), sha,
                               shard_prefix(publisher, level)) for level in write_levels(self.swarm_size)]
        await self._store(entries, now + expires_in)

    async def _store(self, entries: list[tuple[str, str, dict]], expiration: float) -> None:
        """Store our entry at each of its shards (one DHT traversal for all of them)."""
        keys, subkeys, values = zip(*entries)
        done = await self._node.store_many(list(keys), list(values), expiration, subkeys=list(subkeys))
        if not all(done.values()):
            # hivemind reports the answer of whichever replica answered last, so False means "some
            # replica refused or did not answer" (routine while a dead peer is still in routing
            # tables), not that no one holds the record. Counted, not raised.
            self.store_unconfirmed += 1
            log.debug("a DHT replica did not confirm an index record (%s)", keys[0])

    # -- reading the index ------------------------------------------------------------------------
    async def _read(self, plan: dict[str, tuple[int, int, bool]], looked: dict[str, list[int]] | None = None,
                    searched: Collection[str] = ()) -> dict[tuple[int, int], dict[str, dict]]:
        """Read index shards, ``plan`` = {raw key: (round or -1, level, sampled)}, in one traversal;
        returns {(round, level): {publisher: value}} and counts the bytes read (``index_bytes``).
        Only shards chosen at random (``sampled``) go into the size estimate; ``looked`` (the levels
        each favoured publisher was read at, in rounds whose absence counts) and ``searched`` (those
        of them searched for at every level) tell the known publishers' bookkeeping what was found."""
        # sufficient_expiration_time=inf is what get(latest=True) does: ask until the newest is found.
        found = await self._node.get_many(list(plan), sufficient_expiration_time=float("inf")) if plan else {}
        out: dict[tuple[int, int], dict[str, dict]] = {}
        for key, (r, level, sampled) in plan.items():
            entries, size = shard_entries(found.get(key))
            self.index_bytes += size
            if sampled:
                self._sizes.append((r, level, len(entries)))
            out.setdefault((r, level), {}).update(entries)
        if looked:
            at: dict[str, set[int]] = {}
            gone = self._where.gone  # (found in any shard read: missing again when next not found)
            for (_r, level), entries in out.items():
                for p in [p for p in looked if p in entries] + [p for p in entries if p in gone]:
                    at.setdefault(p, set()).add(level)
            self._where.observe(looked, at, level_for(self.swarm_size), self._round_now(), searched)
        return out

    def _sampled_found(self, round: int) -> int:
        """Entries the shards chosen at random found for ``round`` since the last fold: fewer than a
        read wants means the swarm may be bigger than believed (the next read probes the levels
        above). The favoured shards do not count: a reader whose level holds none of the peers
        it knows still finds them where it searched, and would stop probing up."""
        return sum(n for r, _level, n in self._sizes if r == round)

    def _observe_size(self, skip_round: int | None = None) -> None:
        """Fold the shards read since the last call into the swarm-size estimate
        (node/transport/hivemind/size_estimate.py); ``skip_round``: the newest round read."""
        self.swarm_size = next_estimate(self.swarm_size, self._sizes, skip_round)
        self._sizes = []

    def _round_now(self) -> int:
        return int(get_dht_time() // self.round_seconds)

    def _plan(self, key_of, rounds: Iterable[int], wanted: int, skip: int | None = None
              ) -> tuple[dict[str, tuple[int, int, bool]], dict[str, list[int]], list[str]]:
        """The shards to read for ``rounds`` ({raw key: (round, level, sampled)}), the levels each
        favoured known publisher is read at in the rounds whose absence counts (all but ``skip``,
        the newest round: most peers have not published into it yet), and the missing publishers
        searched for at every level this time (in those rounds only, at most MAX_SEARCHES a round:
        node/transport/hivemind/known_shards.py)."""
        plan: dict[str, tuple[int, int, bool]] = {}
        looked: dict[str, list[int]] = {}
        searched: list[str] = []
        known = self._fetcher.known
        level = level_for(self.swarm_size)
        for r in rounds:
            probe = self._short.get(r, True)  # first read of the round, or the last found too few
            judged = r != skip
            search = self._where.searches(known, self._round_now(), most=wanted) if judged else []
            favour = favoured(search, known, self._fetcher.standing.candidates.keys(), wanted, self._rng)
            elsewhere = self._where.plan(favour, level, search)
            rp = read_plan(self.swarm_size, wanted, self._rng, probe_up=probe, favour=favour, elsewhere=elsewhere)
            for prefix in rp.prefixes:
                key = key_of(r, prefix)
                plan[key] = (r, len(prefix), prefix in rp.sampled or plan.get(key, (0, 0, False))[2])
            searched += [p for p in search if p not in searched]
            if judged:
                for p in favour:
                    looked.setdefault(p, []).extend(lv for lv in elsewhere[p] if lv not in looked.get(p, ()))
        return plan, looked, searched

    def admitted(self, publisher: str, round: int) -> None:
        # Standing counts this node's rounds (the newest it polled), not the label (standing.py).
        if self._polled is not None:
            self._fetcher.admitted(publisher, round, self._polled)

    def distrust(self, publisher: str, round: int) -> bool:
        self._fetcher.distrust(publisher, round)
        return True

    def is_own_address(self, publisher: str, addr: str) -> bool:
        # The publisher's signed heartbeat may name any /p2p/ id; only a host that served its body
        # (matching its owner-signed entry) is known to be its own (node/transport/hivemind/served_hosts.py).
        return self._fetcher.served.served(publisher, peer_id_of(addr) or "")

    # -- fetching peers' envelopes ---------------------------------------------------------------
    async def poll(self, rounds: Iterable[int], want: int | None = None,
                   max_size: int | None = None) -> list[Delivery]:
        """Read the index shards of the rounds that still want envelopes and start fetching.
        ``want`` = envelopes a round worth fetching from publishers with a verified history (the
        exchange's J groups' worth); unknown publishers get ``explore_allowance`` fetches a round on
        top. None: fetch everything found (tests, tools)."""
        rounds = list(rounds)
        oldest = min(rounds) if rounds else 0
        self._fetcher.forget_before(oldest)
        self._short = {r: v for r, v in self._short.items() if r >= oldest or r == -1}  # -1: heartbeats
        newest = max(rounds, default=0)
        if rounds:
            self._polled = newest
            self._fetcher.standing.tick(newest)  # a new round: who qualified is vouched
        due = self._fetcher.budget.due(rounds, want, len(self._fetcher.known), get_dht_time(), self.round_seconds)
        wanted = want if want is not None else 64
        skip = newest if len(rounds) > 1 else None  # the newest round: absence there is not telling yet
        found = await self._read(*self._plan(lambda r, p: round_key(self.swarm, r, p), due, wanted, skip))
        for r in due:  # judged on the shards chosen at random: known peers found elsewhere say nothing of N
            self._short[r] = self._sampled_found(r) < 2 * wanted
        self._observe_size(skip_round=skip)
        by_round: dict[int, dict[str, dict]] = {}
        for (r, _level), entries in found.items():
            by_round.setdefault(r, {}).update(entries)
        started = []
        size_limit = MAX_ENVELOPE_SIZE if max_size is None else min(max_size, MAX_ENVELOPE_SIZE)
        for r, entries in by_round.items():
            started += self._fetcher.start_round(r, entries, want, size_limit, self._rng, self._reachable,
                                                 self._download)
        if started:  # fast fetches come back in this poll; a stalling peer cannot hold it long
            await asyncio.wait(started, timeout=FETCH_WAIT_S)
        return self._fetcher.take_ready()

    def _reachable(self) -> set[str]:
        """The libp2p hosts this node has a live DHT route to: entries pointing at them are tried
        before entries pointing at hosts nobody has seen (junk costs a 10 s timeout each)."""
        try:
            return {p.to_base58() for p in self._node.protocol.routing_table.peer_id_to_uid}
        except AttributeError:  # not started, or a hivemind without this table: no preference
            return set()

    async def _download(self, peer, round: int, publisher: str, declared: int) -> bytes:
        try:
            return await download(self._node.p2p, peer, self.swarm, round, publisher, declared)
        except ServesAnother as e:
            # The host's own word (over its authenticated stream) on the one publisher it serves:
            # entries of other keys pointing at it are skipped from now on (``misdirected``).
            self._fetcher.strikes.note_owner(peer.to_base58(), e.owner)
            raise

    # -- heartbeats: small signed envelopes stored in the DHT itself ---------------------------
    async def announce(self, data: bytes, expires_in: float) -> None:
        if len(data) > MAX_ANNOUNCEMENT_SIZE:
            raise ValueError(f"announcement of {len(data)} bytes is over the {MAX_ANNOUNCEMENT_SIZE}-byte limit")
        entries = [heartbeat_entry(self.swarm, self.publisher, bytes(data), shard_prefix(self.publisher, level))
                   for level in write_levels(self.swarm_size)]
        await self._store(entries, get_dht_time() + expires_in)

    async def poll_announcements(self) -> list[Delivery]:
        """Heartbeats of the shards read this time (all of them in a small swarm, a sample of a
        few dozen in a big one) not heard before: who is alive, without a read that grows with
        the swarm."""
        found = await self._read(*self._plan(lambda _r, p: peers_key(self.swarm, p), [-1], HEARTBEATS_WANTED))
        self._short[-1] = self._sampled_found(-1) < 2 * HEARTBEATS_WANTED
        self._observe_size()
        entries: dict[str, dict] = {}
        for got in found.values():
            entries.update(got)
        return self._heard.news(entries, self.publisher)

    async def _stop_watch(self) -> None:
        watch, self._watch = self._watch, None
        if watch is not None:
            watch.cancel()
            await asyncio.gather(watch, return_exceptions=True)

    async def close(self) -> None:
        await self._stop_watch()
        self._fetcher.cancel()
        node, self._node = self._node, None
        if node is not None:
            try:
                await asyncio.wait_for(node.p2p.remove_binary_stream_handler(handler_name(self.swarm)), 2.0)
            except Exception:  # noqa: BLE001 - the daemon may already be gone
                pass
            await stop_dht_node(node)

    def buffer_sizes(self) -> dict[str, int]:
        f = self._fetcher
        b, s = f.budget, f.strikes
        return {"_outbox": len(self._outbox), "_seen": len(b.judged), "_failures": len(b.failures),
                "_heard": len(self._heard), "_inflight": len(f.inflight), "_ready": len(f.ready),
                "_strikes": len(s.publishers.counts), "_backoff": len(s.publishers.until),
                "_host_strikes": len(s.hosts.counts), "_host_backoff": len(s.hosts.until),
                "_served_by": len(s.served_by), "_host_owner": len(s.owners), "_known": len(f.known),
                "_budget": len(b.rounds), "_short": len(self._short), "_sizes": len(self._sizes),
                "_found_at": len(self._where.found_at), "_missing": len(self._where.missing),
                "_body_sizes": len(f.body_sizes), "_served_hosts": len(f.served), "_seen_entries": sum(len(v) for v in b.judged.values())}

    async def broadcast_parts(self, identity, source: str, upload):
        from swarm_node.node.transport.hivemind.directory import WeightDirectory
        from swarm_node.node.transport.hivemind.carrier import HivemindCarrier

        # One p2p daemon per node: the broadcast's streams ride the DHT node's.
        return (HivemindCarrier(self._node.p2p, self.swarm, upload),
                WeightDirectory(self._node, self.swarm, source, identity.peer_id))

    def info(self) -> dict:
        info = {"transport": "hivemind", "maddrs": self.maddrs, "fetch_failures": self.fetch_failures,
                "store_unconfirmed": self.store_unconfirmed, "refused_requests": self.refused_requests,
                "misdirected": self.misdirected, "undialable": self._fetcher.undialable,
                "behind_nat": self.behind_nat, "backed_off": self.backed_off, "swarm_size": round(self.swarm_size),
                "index_bytes": self.index_bytes, "body_bytes": self.body_bytes, "found_via": self.found_via,
                "bootstrap_reintroduced": self._bootstraps.reintroduced if self._bootstraps else 0}
        if self._node is not None:
            info["routing_peers"] = len(self._node.protocol.routing_table.uid_to_peer_id)
        return info
