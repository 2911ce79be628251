"""The hivemind transport: the public (or private) swarm over hivemind's Kademlia DHT.

Each node runs a ``hivemind.dht.DHTNode`` inside its own event loop (not the ``hivemind.DHT``
process wrapper: its pipe breaks on values above ~64 KB and its start blocks a thread). The DHT
holds only small index records, sharded so one read stays small at any swarm size
(node/transport/hivemind/index.py: the ladder of levels, the shard a peer writes, what a node reads);
envelope bodies travel over a libp2p stream from the publisher::

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

    stream  /swarm-node/<swarm>/rollouts                request: u64 round | u8 n | publisher id (n bytes)
                                                        reply:   u64 length | envelope bytes
                                                        (a publisher serves only its own: a request
                                                        naming another id is refused at once)

A receiver reads the shards of the rounds in its window that still want envelopes, fetches about
what it will use (publishers with a verified history first, two unknown ones a round: the fetch
budget, ``poll``'s ``want``) from the ``p2p`` peer, skips an entry declaring more than the node
could use (``max_size``) or than the message limit (``oversized``), refuses a body framed larger
than its entry declared *before* reading it and one whose sha256 differs after
(``hash_mismatch``), and hands the bytes to the node, which verifies the signature. A publisher that does not
answer (gone, or cut off mid-transfer) is retried on the next polls, then given up
(``fetch_failures``); that is routine churn, not a rejection.

Joining is where rl-swarm users get stuck, so it is explicit: the daemon gets a configurable
start-up timeout, every failure says what to check, and start-up retries with exponential
back-off before giving up with a ``TransportError``.
"""

from __future__ import annotations

import asyncio
import collections
import hashlib
import logging
import random
import struct
from dataclasses import dataclass, field
from typing import Callable, Iterable, Optional

from hivemind.dht.node import DHTNode
from hivemind.dht.protocol import DHTProtocol
from hivemind.dht.validation import RecordValidatorBase
from hivemind.p2p import P2PDaemonError, PeerID
from hivemind.utils import get_dht_time

import node.transport.hivemind.patches  # noqa: F401  (hivemind's DHT, patched at import: see that module)
from node.observe.logs import adopt_library_logging
from node.transport.base import MAX_ANNOUNCEMENT_SIZE, MAX_ENVELOPE_SIZE, Delivery, Transport, TransportError
from node.transport.hivemind.index import (bulky_threshold, choose_fetches, estimate_size, explore_allowance, level_for,
                                     peers_key, read_plan, round_key, shard_prefix, write_levels)
from protocol.identity import Identity

adopt_library_logging()  # JSON logs: hivemind's own handler gives way to the node's

log = logging.getLogger(__name__)

__all__ = ["HivemindTransport", "SwarmRecordValidator", "swarm_validator", "index_entry", "heartbeat_entry",
           "start_dht_node", "stop_dht_node"]

_U64 = struct.Struct(">Q")
FETCH_TIMEOUT_S = 10.0
FETCH_WAIT_S = 1.0  # a poll returns what arrived by then; slower fetches are delivered by a later poll
MAX_FETCH_FAILURES = 3  # give up on an index entry whose publisher does not answer this often
MAX_INFLIGHT_FETCHES = 16  # bodies downloading at once (x 4 MiB at most each)
MAX_CONCURRENT_SERVES = 16  # peers downloading our envelopes at once; more are turned away
BACKOFF_ROUNDS = 2  # a publisher whose body failed verification is skipped this many rounds (doubling)
MAX_BACKOFF_ROUNDS = 64
OWNER_REPLY_TIMEOUT_S = 2.0  # a refusing host writes its answer at once
MAX_KNOWN_PUBLISHERS = 4096  # publishers with a verified history (and heartbeats) remembered
HEARTBEATS_WANTED = 4  # heartbeat shards are read to find about twice this many peers
# A stored record's value is {"d": value, "pk": 32 bytes, "sig": 64 bytes} (dht_records), plus its
# subkey and expiration on the wire: what an entry costs a reader beyond its own value.
_WRAPPER_BYTES = 120


@dataclass
class _RoundBudget:
    """What a node has spent on one round's envelopes."""

    known: int = 0  # fetches of publishers with a verified history (a failed one is given back)
    explored: int = 0  # fetches of unknown publishers, whatever they brought
    last_read: float = float("-inf")
    tried: set = field(default_factory=set)


def _handler_name(swarm: str) -> str:
    return f"/swarm-node/{swarm}/rollouts"


def _no_bootstrap(initial_peers: list[str]) -> str:
    return (f"no bootstrap peer answered ({', '.join(initial_peers)}): check the addresses (each "
            f"ends in /p2p/<peer id>, as `swarm-node bootstrap` prints it), that the bootstrap node "
            f"is running and that its port is reachable from here (firewall, NAT)")


from node.transport.hivemind.records import MAX_RECORD_TTL_S, PEER_ID_RE  # noqa: F401 - MAX_RECORD_TTL_S re-exported
from node.transport.hivemind.index_records import (HEARTBEAT_ROUNDS, ROUND_ENTRY_ROUNDS, SwarmRecordValidator,  # noqa: F401
                                         heartbeat_entry, index_entry, swarm_validator)


async def start_dht_node(*, initial_peers: list[str], host_maddrs: list[str],
                         announce_maddrs: list[str] | None = None, identity_path: str | None = None,
                         startup_timeout: float = 30.0, retries: int = 5, backoff: float = 2.0,
                         use_relay: bool = True, nat_port_map: bool = True,
                         record_validator: RecordValidatorBase | None = None,
                         on_retry: Optional[Callable[[str], None]] = None):
    """Start a DHTNode with health checks; retries with back-off, then a clear ``TransportError``.
    ``on_retry`` hears a one-line summary of each failed attempt (for the node's status)."""
    kwargs = dict(host_maddrs=host_maddrs, startup_timeout=startup_timeout, use_relay=use_relay,
                  nat_port_map=nat_port_map, auto_nat=nat_port_map)
    if announce_maddrs:
        kwargs["announce_maddrs"] = announce_maddrs
    if identity_path:
        kwargs["identity_path"] = identity_path
    delay = backoff
    for attempt in range(retries + 1):
        try:
            return await DHTNode.create(initial_peers=initial_peers or None,
                                        ensure_bootstrap_success=bool(initial_peers),
                                        record_validator=record_validator, **kwargs)
        except P2PDaemonError as e:
            if "already taken" in str(e):
                raise TransportError(
                    f"the p2p identity {identity_path} is in use by another running peer: stop the "
                    f"other node, or give this one its own --swarm.identity") from e
            if "bootstrap" in str(e):
                problem = _no_bootstrap(initial_peers)
            else:
                problem = (f"the p2p daemon (p2pd) did not start: {e}. If the machine is slow or busy, "
                       f"raise --swarm.startup_timeout (now {startup_timeout:g} s); check that "
                       f"{host_maddrs} are free addresses of this machine")
        except RuntimeError as e:
            if "bootstrap" not in str(e):
                raise
            problem = _no_bootstrap(initial_peers)
        if attempt == retries:
            raise TransportError(f"could not join the swarm after {retries + 1} attempts: {problem}")
        log.warning("joining failed (attempt %d/%d): %s; retrying in %.1f s", attempt + 1,
                    retries + 1, problem, delay)
        if on_retry is not None:
            on_retry(f"attempt {attempt + 1}/{retries + 1} failed: {problem.split(':')[0]}; "
                     f"retrying in {delay:.0f} s")
        await asyncio.sleep(delay)
        delay *= 2
    raise AssertionError("unreachable")


async def stop_dht_node(node, timeout: float = 10.0) -> None:
    """Shut a DHTNode and its p2pd down, even when the daemon is already gone.

    A Ctrl-C in a terminal signals the whole process group, so p2pd often dies before the node
    shuts down; ``DHTNode.shutdown`` then waits forever on the dead daemon's control socket.
    Give it ``timeout`` seconds, then stop the daemon directly.
    """
    try:
        await asyncio.wait_for(node.shutdown(), timeout)
    except (asyncio.TimeoutError, ConnectionError, OSError) as e:
        log.debug("DHT node shutdown did not finish (%s); stopping p2pd directly", type(e).__name__)
        try:
            await asyncio.wait_for(node.p2p.shutdown(), timeout)
        except (asyncio.TimeoutError, ConnectionError, OSError):
            log.warning("p2pd did not stop within %.0f s", timeout)


@dataclass
class HivemindTransport(Transport):
    initial_peers: list[str] = field(default_factory=list)
    host_maddrs: list[str] = field(default_factory=lambda: ["/ip4/127.0.0.1/tcp/0"])
    announce_maddrs: list[str] = field(default_factory=list)
    p2p_identity_path: Optional[str] = None
    startup_timeout: float = 30.0
    join_retries: int = 5
    join_backoff: float = 2.0
    use_relay: bool = True
    nat_port_map: bool = True
    round_seconds: float = 5.0  # for the record validator (round expiry) and how often the index is read
    on_retry: Optional[Callable[[str], None]] = field(default=None, repr=False)  # join attempts, for status
    signer: Optional[Identity] = field(default=None, repr=False)  # signs our DHT records; its peer id is ours
    _node: object = field(default=None, init=False, repr=False)
    _outbox: dict = field(default_factory=dict, init=False, repr=False)  # round -> (bytes, expires_at)
    _seen: dict = field(default_factory=dict, init=False, repr=False)  # round -> {(publisher, sha)}
    _failures: dict = field(default_factory=dict, init=False, repr=False)  # (round, publisher, sha) -> n
    _heard: collections.OrderedDict = field(default_factory=collections.OrderedDict, init=False,
                                            repr=False)  # publisher -> its last heartbeats' sha256
    _inflight: dict = field(default_factory=dict, init=False, repr=False)  # (round, publisher, sha) -> task
    _ready: list = field(default_factory=list, init=False, repr=False)  # fetched, not yet returned
    _serving: asyncio.Semaphore = field(default_factory=lambda: asyncio.Semaphore(MAX_CONCURRENT_SERVES),
                                        init=False, repr=False)
    maddrs: list = field(default_factory=list, init=False)
    fetch_failures: int = field(default=0, init=False)  # bodies given up on (peer gone, cut off)
    store_unconfirmed: int = field(default=0, init=False)
    refused_requests: int = field(default=0, init=False)  # fetches of ours naming another publisher
    misdirected: int = field(default=0, init=False)  # entries pointing at a host that serves another publisher
    backed_off: int = field(default=0, init=False)  # back-offs of publishers whose bodies failed
    _strikes: dict = field(default_factory=dict, init=False, repr=False)  # publisher -> failures
    _backoff: dict = field(default_factory=dict, init=False, repr=False)  # publisher -> skip until round
    _host_strikes: dict = field(default_factory=dict, init=False, repr=False)  # libp2p host -> bad bodies
    _host_backoff: dict = field(default_factory=dict, init=False, repr=False)  # host -> skip until round
    _served_by: dict = field(default_factory=dict, init=False, repr=False)  # (round, publisher) -> host
    _host_owner: collections.OrderedDict = field(default_factory=collections.OrderedDict, init=False,
                                                 repr=False)  # host -> the publisher it says it serves
    _known: collections.OrderedDict = field(default_factory=collections.OrderedDict, init=False, repr=False)
    _budget: dict = field(default_factory=dict, init=False, repr=False)  # round -> _RoundBudget
    _short: dict = field(default_factory=dict, init=False, repr=False)  # round -> last read found too few
    _sizes: list = field(default_factory=list, init=False, repr=False)  # (round, level, entries) read, not folded yet
    _rng: random.Random = field(default_factory=random.Random, init=False, repr=False)
    _body_sizes: collections.deque = field(default_factory=lambda: collections.deque(maxlen=64), init=False,
                                           repr=False)  # sizes of the bodies fetched lately
    swarm_size: float = field(default=1.0, init=False)  # peers, as estimated from the shards read
    index_bytes: int = field(default=0, init=False)  # index entries read (signed records, as sent)
    body_bytes: int = field(default=0, init=False)  # envelope bodies downloaded

    async def start(self, retries: int | None = None) -> None:
        if self.signer is None or self.signer.peer_id != self.publisher:
            raise TransportError("the hivemind transport needs the publisher's identity (signer) to sign "
                                 "its DHT records; its peer id must be the publisher")
        self._node = await start_dht_node(
            initial_peers=self.initial_peers, host_maddrs=self.host_maddrs,
            announce_maddrs=self.announce_maddrs, identity_path=self.p2p_identity_path,
            startup_timeout=self.startup_timeout, retries=self.join_retries if retries is None else retries,
            backoff=self.join_backoff, use_relay=self.use_relay, nat_port_map=self.nat_port_map,
            record_validator=swarm_validator(self.swarm, self.round_seconds, self.signer),
            on_retry=self.on_retry)
        try:
            await self._node.p2p.add_binary_stream_handler(_handler_name(self.swarm), self._serve)
            self.maddrs = [str(m) for m in await self._node.p2p.get_visible_maddrs()]
        except BaseException:
            await self.close()
            raise
        log.info("hivemind transport up: %s", ", ".join(self.maddrs))

    def alive(self) -> bool:
        # hivemind's P2P.is_alive() stays True when the daemon dies by itself: ask the process.
        child = getattr(getattr(self._node, "p2p", None), "_child", None)
        return self._node is not None and (child is None or child.returncode is None)

    async def restart(self) -> None:
        """A new DHT node and p2p daemon with the same p2p key (same address for peers); what
        this node has published and not yet seen expire is announced again."""
        for task in list(self._inflight.values()):
            task.cancel()
        self._inflight.clear()
        node, self._node = self._node, None
        if node is not None:
            await stop_dht_node(node, timeout=2.0)
        await self.start(retries=0)  # the caller (node/swarm/link.py) owns the back-off between tries
        now = get_dht_time()
        for r, (data, expires_at) in list(self._outbox.items()):
            if expires_at > now:
                await self.publish(r, data, expires_at - now)

    @property
    def p2p_peer_id(self) -> str:
        return self._node.p2p.peer_id.to_base58()

    # -- serving our envelopes ------------------------------------------------------------------
    async def _serve(self, info, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        if self._serving.locked():  # bounded: slow or hostile downloaders cannot pile up
            writer.close()
            return
        async with self._serving:
            try:
                (round,) = _U64.unpack(await asyncio.wait_for(reader.readexactly(_U64.size), FETCH_TIMEOUT_S))
                (n,) = await asyncio.wait_for(reader.readexactly(1), FETCH_TIMEOUT_S)
                asked = (await asyncio.wait_for(reader.readexactly(n), FETCH_TIMEOUT_S)).decode("ascii", "replace")
                if asked != self.publisher:
                    # An index entry (someone else's, signed by them) pointing at our address: we
                    # never serve our body for it, so junk entries cannot spend our upload. The
                    # reply says whom we serve: over this authenticated stream only we can say it,
                    # and readers then skip every other key's entry pointing here.
                    self.refused_requests += 1
                    me = self.publisher.encode("ascii")
                    writer.write(_U64.pack(0) + bytes([len(me)]) + me)
                    await asyncio.wait_for(writer.drain(), FETCH_TIMEOUT_S)
                    return
                data = self._outbox.get(round, (b"", 0))[0]
                writer.write(_U64.pack(len(data)))
                writer.write(data)  # no concatenated copy of a body of up to 4 MiB
                await asyncio.wait_for(writer.drain(), FETCH_TIMEOUT_S)
                # Close once the reader has closed its end: p2pd drops what is still in flight when
                # the server closes first (seen with the weight broadcast's 256 KiB replies under load).
                await asyncio.wait_for(reader.read(1), FETCH_TIMEOUT_S)
            except (asyncio.TimeoutError, asyncio.IncompleteReadError, ConnectionError) as e:
                log.debug("rollout request from %s failed: %s", info.peer_id, e)
            finally:
                writer.close()

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
        for r in [r for r, (_, exp) in self._outbox.items() if exp <= now]:
            del self._outbox[r]
        self._outbox[round] = (bytes(data), now + expires_in)
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
    async def _read(self, plan: dict[str, tuple[int, int]]) -> dict[tuple[int, int], dict[str, dict]]:
        """Read index shards, ``plan`` = {raw key: (round or -1, level)}, in one traversal; returns
        {(round, level): {publisher: value}} and counts the bytes read (``index_bytes``: each
        entry's value, subkey and signature wrapper, as the replica sent it)."""
        # sufficient_expiration_time=inf is what get(latest=True) does: ask until the newest is found.
        found = await self._node.get_many(list(plan), sufficient_expiration_time=float("inf")) if plan else {}
        out: dict[tuple[int, int], dict[str, dict]] = {}
        for key, (r, level) in plan.items():
            got = found.get(key)
            entries = {}
            if got is not None and isinstance(got.value, dict):
                for publisher, entry in got.value.items():
                    value = getattr(entry, "value", None)
                    if isinstance(publisher, str) and isinstance(value, dict):
                        entries[publisher] = value
                        self.index_bytes += _WRAPPER_BYTES + len(publisher) + len(DHTProtocol.serializer.dumps(value))
            self._sizes.append((r, level, len(entries)))
            out.setdefault((r, level), {}).update(entries)
        return out

    def _observe_size(self, skip_round: int | None = None) -> None:
        """Fold the shards read since the last call into the swarm-size estimate: up at once (a
        shard read can only under-count the writers, and a newcomer must find its level fast),
        down halfway (one unlucky read must not send the node to a level no one writes). The
        newest round's shards are not counted: most peers have not published into it yet."""
        level = level_for(self.swarm_size)
        seen = [(lv, n) for r, lv, n in self._sizes if r != skip_round]
        # The newest round's probes of the levels above count, but only to raise the estimate:
        # a round's first read is where a node probes up, and a node whose estimate is low but
        # whose own level's shards look full (a level only some writers use) would otherwise
        # never see the level above counted, and stay low (measured: stuck at ~460 of 1,000 peers
        # in some runs of scripts/bench_index_scale.py, reading 3.6x the J groups instead of 2.7x).
        probes = [(lv, n) for r, lv, n in self._sizes if r == skip_round and lv > level]
        self._sizes = []
        if not seen and not probes:
            return
        n = (estimate_size(seen) or 1.0) if seen else None
        up = estimate_size(probes) if probes else None
        if up is not None and up > self.swarm_size and (n is None or up > n):
            n = up
        if n is None:
            return
        if n > self.swarm_size:  # up fast, but not to whatever one read of a ground shard says
            self.swarm_size = min(n, 4 * self.swarm_size)
        else:
            self.swarm_size = max(1.0, (self.swarm_size + n) / 2)

    def _plan(self, key_of, rounds: Iterable[int], wanted: int) -> dict[str, tuple[int, int]]:
        plan = {}
        known = list(self._known)
        for r in rounds:
            probe = self._short.get(r, True)  # first read of the round, or the last found too few
            favour = self._rng.sample(known, min(wanted, len(known)))
            for prefix in read_plan(self.swarm_size, wanted, self._rng, probe_up=probe, favour=favour):
                plan[key_of(r, prefix)] = (r, len(prefix))
        return plan

    def vouch(self, publisher: str) -> None:
        """The node admitted an envelope of ``publisher``: it now has a verified history, and is
        fetched before unknown keys (bounded: keys are free)."""
        self._known[publisher] = True
        self._known.move_to_end(publisher)
        self._strikes.pop(publisher, None)  # an admitted envelope ends its back-off record
        for (_, p), host in self._served_by.items():  # ... and its host's
            if p == publisher:
                self._host_strikes.pop(host, None)
        if len(self._known) > MAX_KNOWN_PUBLISHERS:
            self._known.popitem(last=False)

    # -- fetching peers' envelopes ---------------------------------------------------------------
    async def poll(self, rounds: Iterable[int], want: int | None = None,
                   max_size: int | None = None) -> list[Delivery]:
        """Read the index shards of the rounds that still want envelopes and start fetching.
        ``want`` = envelopes a round worth fetching from publishers with a verified history (the
        exchange's J groups' worth); unknown publishers get ``explore_allowance`` fetches a round on
        top. None: fetch everything found (tests, tools)."""
        rounds = list(rounds)
        oldest = min(rounds) if rounds else 0
        for old in [r for r in self._seen if r < oldest]:
            del self._seen[old]
        self._failures = {k: v for k, v in self._failures.items() if k[0] >= oldest}
        self._backoff = {p: until for p, until in self._backoff.items() if until >= oldest}
        self._host_backoff = {h: until for h, until in self._host_backoff.items() if until >= oldest}
        self._served_by = {k: h for k, h in self._served_by.items() if k[0] >= oldest}
        self._budget = {r: b for r, b in self._budget.items() if r >= oldest}
        self._short = {r: v for r, v in self._short.items() if r >= oldest or r == -1}  # -1: heartbeats
        now = get_dht_time()
        newest = max(rounds, default=0)
        due = []
        for r in rounds:
            b = self._budget.setdefault(r, _RoundBudget())
            if want is not None and b.known >= want and b.explored >= explore_allowance(r, len(self._known), want):
                continue  # this round has what it needs
            # The newest two rounds are re-read as entries arrive; older ones once a round.
            every = self.round_seconds / 4 if r >= newest - 1 else self.round_seconds
            if want is None or now - b.last_read >= every:
                b.last_read = now
                due.append(r)
        wanted = want if want is not None else 64
        found = await self._read(self._plan(lambda r, p: round_key(self.swarm, r, p), due, wanted))
        self._observe_size(skip_round=newest if len(rounds) > 1 else None)
        by_round: dict[int, dict[str, dict]] = {}
        for (r, _level), entries in found.items():
            by_round.setdefault(r, {}).update(entries)
        started = []
        size_limit = MAX_ENVELOPE_SIZE if max_size is None else min(max_size, MAX_ENVELOPE_SIZE)
        for r, entries in by_round.items():
            seen = self._seen.setdefault(r, set())
            b = self._budget[r]
            self._short[r] = len(entries) < 2 * wanted
            fresh = {}
            for publisher, record in entries.items():
                if publisher == self.publisher or not self._valid_index(record):
                    continue
                if self._backoff.get(publisher, -1) >= r or self._host_backoff.get(record["p2p"], -1) >= r:
                    continue  # its (or its host's) last body failed verification: not fetched for a while
                ident = (r, publisher, record["sha256"])
                if ident[1:] in seen or ident in self._inflight or publisher in b.tried:
                    continue
                owner = self._host_owner.get(record["p2p"])
                if owner is not None and owner != publisher:  # that host said it serves someone else
                    seen.add(ident[1:])
                    self.misdirected += 1
                    continue
                if record["size"] > size_limit:  # more than the node could use: not fetched
                    seen.add(ident[1:])
                    self.rejected["oversized"] += 1
                    continue
                fresh[publisher] = record
            if want is None:
                picks = list(fresh)
                random.shuffle(picks)
            else:
                limit = bulky_threshold(self._body_sizes)
                picks = choose_fetches(list(fresh), self._known, want - b.known,
                                       explore_allowance(r, len(self._known), want) - b.explored, self._rng,
                                       bulky={p for p, rec in fresh.items() if rec["size"] > limit},
                                       hosts={p: rec["p2p"] for p, rec in fresh.items()},
                                       reachable=self._reachable())
            for publisher in picks:
                record = fresh[publisher]
                if len(self._inflight) >= MAX_INFLIGHT_FETCHES:
                    break  # bounded memory; the rest is fetched by later polls
                known = publisher in self._known
                if known:
                    b.known += 1
                else:
                    b.explored += 1  # spent whatever the fetch brings
                b.tried.add(publisher)
                task = asyncio.create_task(self._fetch(r, publisher, record, known or want is None))
                self._inflight[(r, publisher, record["sha256"])] = task
                started.append(task)
        if started:  # fast fetches come back in this poll; a stalling peer cannot hold it long
            await asyncio.wait(started, timeout=FETCH_WAIT_S)
        ready, self._ready = self._ready, []
        return ready

    def _reachable(self) -> set[str]:
        """The libp2p hosts this node has a live DHT route to: entries pointing at them are tried
        before entries pointing at hosts nobody has seen (junk costs a 10 s timeout each)."""
        try:
            return {p.to_base58() for p in self._node.protocol.routing_table.peer_id_to_uid}
        except AttributeError:  # not started, or a hivemind without this table: no preference
            return set()

    @staticmethod
    def _valid_index(record: object) -> bool:
        return (isinstance(record, dict) and isinstance(record.get("p2p"), str)
                and isinstance(record.get("size"), int) and isinstance(record.get("sha256"), str)
                and len(record["sha256"]) == 64)

    async def _fetch(self, round: int, publisher: str, record: dict, retry: bool = True) -> None:
        """Download one body in the background; a verified-size, hash-matching one goes to
        ``_ready`` for the next ``poll`` to return. A failed fetch of a publisher with a verified
        history (``retry``) gives its slot back and is retried; an unknown one's is not."""
        ident = (publisher, record["sha256"])
        ok = False
        try:
            data = await asyncio.wait_for(
                self._download(PeerID.from_base58(record["p2p"]), round, publisher, record["size"]), FETCH_TIMEOUT_S)
            ok = True
        except (_Oversized, _NotAnnounced) as e:
            self._seen.setdefault(round, set()).add(ident)
            self.rejected["oversized" if isinstance(e, _Oversized) else "hash_mismatch"] += 1
            self._back_off(publisher, round, host=record["p2p"])
            return
        except asyncio.CancelledError:
            ok = None  # closing or restarting: not the publisher's doing
            raise
        except Exception as e:  # noqa: BLE001 - a peer that vanished mid-transfer is routine
            n = self._failures[(round, *ident)] = self._failures.get((round, *ident), 0) + 1
            log.debug("fetching round %d from %s failed (%d/%d): %s: %s", round, publisher, n,
                      MAX_FETCH_FAILURES, type(e).__name__, e)
            return
        finally:
            self._inflight.pop((round, *ident), None)
            if ok is False:
                self._fetch_failed(round, publisher, ident, retry)
        self._seen.setdefault(round, set()).add(ident)
        self.body_bytes += len(data)
        self._body_sizes.append(len(data))
        if hashlib.sha256(data).hexdigest() != record["sha256"]:
            self.rejected["hash_mismatch"] += 1
            self._back_off(publisher, round, host=record["p2p"])
            return
        self._served_by[(round, publisher)] = record["p2p"]  # the host the node's verdict is about
        self._ready.append(Delivery(round, publisher, data))

    def _fetch_failed(self, round: int, publisher: str, ident: tuple, retry: bool) -> None:
        """A fetch that brought nothing usable. A publisher with a verified history (``retry``)
        gets its slot back and is retried, up to MAX_FETCH_FAILURES; then, or at once for an
        unknown key (junk entries cost their sender, not the reader's next rounds), it is given
        up for the round, and a known one loses its standing."""
        b = self._budget.get(round)
        n = self._failures.get((round, *ident), 0)
        if ident in self._seen.get(round, ()):
            return  # already judged (oversized): backed off there
        if retry and 0 < n < MAX_FETCH_FAILURES and b is not None:
            if publisher in self._known and b.known > 0:
                b.known -= 1
            b.tried.discard(publisher)
            return
        self._seen.setdefault(round, set()).add(ident)
        if n >= MAX_FETCH_FAILURES or not retry:
            self.fetch_failures += 1
        if publisher in self._known:
            self._known.pop(publisher, None)  # gone or stalling: back to the unknown
        elif not retry:
            self._back_off(publisher, round)

    def distrust(self, publisher: str, round: int) -> None:
        # The body is what the publisher's owner-signed entry announced (sha256), so a refusal of
        # it is the publisher's own doing: nobody can get an honest key backed off this way. Its
        # host served it, and an honest host serves only its own publisher's: the host goes too.
        self._back_off(publisher, round, host=self._served_by.get((round, publisher)))

    def _back_off(self, publisher: str, round: int, host: str | None = None) -> None:
        """Skip a publisher whose body failed verification for the next rounds, twice as long at
        each new failure: its entries cost a fetch each, and its key signed them. ``host``: the
        libp2p peer that served that body, skipped the same way (keys are free, hosts are not:
        fresh keys pointing at the same bad host cost nothing more). Only a host that *served*
        a bad body: one that refused a request or timed out may be an honest node that junk
        entries point at."""
        k = self._strikes[publisher] = self._strikes.get(publisher, 0) + 1
        if len(self._strikes) > 4096:  # keys are free: forget the oldest strikes, not memory
            self._strikes.pop(next(iter(self._strikes)))
        self._backoff[publisher] = round + min(MAX_BACKOFF_ROUNDS, BACKOFF_ROUNDS * 2 ** (k - 1))
        if host is not None:
            h = self._host_strikes[host] = self._host_strikes.get(host, 0) + 1
            if len(self._host_strikes) > 4096:
                self._host_strikes.pop(next(iter(self._host_strikes)))
            self._host_backoff[host] = round + min(MAX_BACKOFF_ROUNDS, BACKOFF_ROUNDS * 2 ** (h - 1))
        self._known.pop(publisher, None)
        self.backed_off += 1

    async def _download(self, peer, round: int, publisher: str, declared: int) -> bytes:
        _, reader, writer = await self._node.p2p.call_binary_stream_handler(peer, _handler_name(self.swarm))
        try:
            name = publisher.encode("ascii")
            writer.write(_U64.pack(round) + bytes([len(name)]) + name)
            await writer.drain()
            (size,) = _U64.unpack(await reader.readexactly(_U64.size))
            if size > MAX_ENVELOPE_SIZE:  # refuse before buffering a byte of it
                raise _Oversized(size)
            if size == 0:  # routine (a restarted publisher, a round it dropped), or not its host
                owner = await self._read_owner(reader)
                if owner is not None and owner != publisher:
                    self._note_owner(peer.to_base58(), owner)
                    raise LookupError(f"that host serves {owner}, not {publisher}")
                raise LookupError("the publisher no longer holds this round")
            if size != declared:  # not what the signed entry announced (and the size limit judged)
                raise _NotAnnounced(size)
            return await reader.readexactly(size)
        finally:
            writer.close()

    @staticmethod
    async def _read_owner(reader) -> str | None:
        """After a zero length, the publisher the host says it serves (absent from a publisher that
        only no longer holds the round)."""
        try:
            (n,) = await asyncio.wait_for(reader.readexactly(1), OWNER_REPLY_TIMEOUT_S)
            name = (await asyncio.wait_for(reader.readexactly(n), OWNER_REPLY_TIMEOUT_S)).decode("ascii")
        except (asyncio.TimeoutError, asyncio.IncompleteReadError, UnicodeDecodeError, ConnectionError):
            return None
        return name if PEER_ID_RE.fullmatch(name) else None

    def _note_owner(self, host: str, owner: str) -> None:
        """A host's own word (over its authenticated stream) on the one publisher it serves:
        entries of other keys pointing at it are skipped from now on (``misdirected``)."""
        self._host_owner.pop(host, None)
        self._host_owner[host] = owner
        if len(self._host_owner) > MAX_KNOWN_PUBLISHERS:
            self._host_owner.popitem(last=False)

    # -- heartbeats: small signed envelopes stored in the DHT itself ---------------------------
    async def announce(self, data: bytes, expires_in: float) -> None:
        if len(data) > MAX_ANNOUNCEMENT_SIZE:
            raise ValueError(f"announcement of {len(data)} bytes is over the {MAX_ANNOUNCEMENT_SIZE}-byte limit")
        entries = [heartbeat_entry(self.swarm, self.publisher, bytes(data), shard_prefix(self.publisher, level))
                   for level in write_levels(self.swarm_size)]
        await self._store(entries, get_dht_time() + expires_in)

    async def poll_announcements(self) -> list[Delivery]:
        """Heartbeats of the shards read this time (all of them in a small swarm, a sample of a
        few dozen in a big one): who is alive, without a read that grows with the swarm."""
        plan = self._plan(lambda _r, p: peers_key(self.swarm, p), [-1], HEARTBEATS_WANTED)
        found = await self._read(plan)
        self._observe_size()
        entries: dict[str, dict] = {}
        for got in found.values():
            entries.update(got)
        self._short[-1] = len(entries) < 2 * HEARTBEATS_WANTED
        out = []
        for publisher, value in entries.items():
            data = value.get("hb")
            if publisher == self.publisher or not isinstance(data, bytes):
                continue
            digest = hashlib.sha256(data).digest()
            # A writer's heartbeat sits at one or two levels, refreshed at different times: an
            # older copy read from the other level is not news (the verifier would call it a replay).
            recent = self._heard.get(publisher, ())
            if digest not in recent:
                self._heard[publisher] = (*recent[-3:], digest)
                self._heard.move_to_end(publisher)
                if len(self._heard) > MAX_KNOWN_PUBLISHERS:
                    self._heard.popitem(last=False)
                out.append(Delivery(-1, publisher, data))
        return out

    async def close(self) -> None:
        for task in list(self._inflight.values()):
            task.cancel()
        self._inflight.clear()
        node, self._node = self._node, None
        if node is not None:
            try:
                await asyncio.wait_for(node.p2p.remove_binary_stream_handler(_handler_name(self.swarm)), 2.0)
            except Exception:  # noqa: BLE001 - the daemon may already be gone
                pass
            await stop_dht_node(node)

    def buffer_sizes(self) -> dict[str, int]:
        sizes = {name: len(getattr(self, name)) for name in (
            "_outbox", "_seen", "_failures", "_heard", "_inflight", "_ready", "_strikes", "_backoff",
            "_host_strikes", "_host_backoff", "_served_by", "_host_owner", "_known", "_budget", "_short",
            "_sizes", "_body_sizes")}
        sizes["_seen_entries"] = sum(len(v) for v in self._seen.values())
        return sizes

    async def broadcast_parts(self, identity, source: str, upload):
        from node.transport.hivemind.directory import WeightDirectory
        from node.transport.hivemind.carrier import HivemindCarrier

        # One p2p daemon per node: the broadcast's streams ride the DHT node's.
        return (HivemindCarrier(self._node.p2p, self.swarm, upload),
                WeightDirectory(self._node, self.swarm, source, identity.peer_id))

    def info(self) -> dict:
        info = {"transport": "hivemind", "maddrs": self.maddrs, "fetch_failures": self.fetch_failures,
                "store_unconfirmed": self.store_unconfirmed, "refused_requests": self.refused_requests,
                "misdirected": self.misdirected,
                "backed_off": self.backed_off, "swarm_size": round(self.swarm_size),
                "index_bytes": self.index_bytes, "body_bytes": self.body_bytes}
        if self._node is not None:
            info["routing_peers"] = len(self._node.protocol.routing_table.uid_to_peer_id)
        return info


class _Oversized(Exception):
    def __init__(self, size: int):
        super().__init__(f"declared {size} bytes")


class _NotAnnounced(Exception):
    def __init__(self, size: int):
        super().__init__(f"a {size}-byte body, not the size its index entry announced")
