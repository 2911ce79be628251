"""The hivemind transport: the public (or private) swarm over hivemind's Kademlia DHT.

Each node runs a ``hivemind.dht.DHTNode`` inside its own event loop (not the ``hivemind.DHT``
process wrapper: its pipe breaks on values above ~64 KB and its start blocks a thread). The DHT
holds only small index records; envelope bodies travel over a libp2p stream from the publisher::

    key     swarm-node/<swarm>/rollouts/<round>         one key per round of the shared clock
    subkey  <peer id>                                   the publisher (sn1..., our Ed25519 id)
    value   {"p2p": <libp2p peer id>, "size": <bytes>, "sha256": <hex>}, owner-signed
    expires (max_round_lag + 2) round lengths after publishing; never later than 32 rounds after
            the round began (+ 60 s slack), the same bound on every node

    key     swarm-node/<swarm>/peers                    heartbeats
    subkey  <peer id>
    value   signed Announcement envelope (<= 8 KiB; the only body kept in the DHT itself),
            owner-signed as a DHT record too (the envelope's signature does not cover expiry)

Owner-signed (node/transport/dht_records.py): the value travels with the publisher's Ed25519 key
and a signature over (key, subkey, value, expiration); every node and the bootstrap peer refuse
a record under a peer's subkey that its owner did not sign, so nobody can write, or outlive,
another peer's entry.

    stream  /swarm-node/<swarm>/rollouts                request: u64 round | u8 n | publisher id (n bytes)
                                                        reply:   u64 length | envelope bytes
                                                        (a publisher serves only its own: a request
                                                        naming another id is refused at once)

A receiver polls the keys of the rounds in its window, fetches each body it has not seen from
the ``p2p`` peer, checks the declared size *before* reading (``oversized``) and the sha256
after (``hash_mismatch``), and hands the bytes to the node, which verifies the signature. A publisher that does not
answer (gone, or cut off mid-transfer) is retried on the next polls, then given up
(``fetch_failures``); that is routine churn, not a rejection.

Joining is where rl-swarm users get stuck, so it is explicit: the daemon gets a configurable
start-up timeout, every failure says what to check, and start-up retries with exponential
back-off before giving up with a ``TransportError``.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import random
import re
import struct
from dataclasses import dataclass, field
from typing import Callable, Iterable, Optional

from hivemind.dht.node import DHTNode
from hivemind.dht.protocol import DHTProtocol
from hivemind.dht.routing import DHTID
from hivemind.dht.validation import CompositeValidator, DHTRecord, RecordValidatorBase
from hivemind.p2p import P2PDaemonError, PeerID
from hivemind.utils import get_dht_time

from node.log_setup import adopt_library_logging
from node.transport.base import MAX_ANNOUNCEMENT_SIZE, MAX_ENVELOPE_SIZE, Delivery, Transport, TransportError
from node.transport.dht_records import CLOCK_SLACK_S, MAX_RECORD_TTL_S, PEER_ID_RE, OwnerSignatureValidator
from protocol.identity import Identity

adopt_library_logging()  # JSON logs: hivemind's own handler gives way to the node's

log = logging.getLogger(__name__)

__all__ = ["HivemindTransport", "SwarmRecordValidator", "swarm_validator", "start_dht_node", "stop_dht_node"]

_U64 = struct.Struct(">Q")
FETCH_TIMEOUT_S = 10.0
FETCH_WAIT_S = 1.0  # a poll returns what arrived by then; slower fetches are delivered by a later poll
MAX_FETCH_FAILURES = 3  # give up on an index entry whose publisher does not answer this often
MAX_INFLIGHT_FETCHES = 16  # bodies downloading at once (x 4 MiB at most each)
MAX_CONCURRENT_SERVES = 16  # peers downloading our envelopes at once; more are turned away
BACKOFF_ROUNDS = 2  # a publisher whose body failed verification is skipped this many rounds (doubling)
MAX_BACKOFF_ROUNDS = 64


def _round_key(swarm: str, round: int) -> str:
    return f"swarm-node/{swarm}/rollouts/{round}"


def _peers_key(swarm: str) -> str:
    return f"swarm-node/{swarm}/peers"


def _handler_name(swarm: str) -> str:
    return f"/swarm-node/{swarm}/rollouts"


def _no_bootstrap(initial_peers: list[str]) -> str:
    return (f"no bootstrap peer answered ({', '.join(initial_peers)}): check the addresses (each "
            f"ends in /p2p/<peer id>, as `swarm-node bootstrap` prints it), that the bootstrap node "
            f"is running and that its port is reachable from here (firewall, NAT)")


ROUND_ENTRY_ROUNDS = 32  # a round's index entry expires within this many rounds of the round's start
_CLOCK_SLACK_S = CLOCK_SLACK_S
_SHA256_RE = re.compile(r"[0-9a-f]{64}")


class SwarmRecordValidator(RecordValidatorBase):
    """What honest nodes of a swarm accept into (and from) the DHT.

    hivemind keeps records unauthenticated: without this, one store of a plain value under a
    round's key, with a far-future expiry, would replace every peer's index entry for that round
    (or every heartbeat) and make later honest stores fail. So each node checks every record it
    is asked to store and every record a lookup returns:

    - any record: expires within ``MAX_RECORD_TTL_S`` (an hour; ours live a few rounds), so
      nothing can be planted long in advance;
    - this swarm's round keys, for every round from the staleness window to beyond that hour, and
      its heartbeat key: the subkey is a peer id (``sn1…``), never a plain value; round values are
      exactly ``{"p2p": str, "size": int, "sha256": 64 hex}``, heartbeats are bytes up to 8 KiB.

    - a round's entry expires within 32 rounds of the round's start (``_round_expiry_cap``): the
      owner cannot keep an entry alive long past the rounds anyone reads.

    Key ids are hashes, so the rounds to recognise are computed ahead (and refreshed as the clock
    moves). Who may write a peer's subkey is ``OwnerSignatureValidator``'s rule, which runs before
    this one (``swarm_validator``); this one sees the value it unwrapped.
    """

    def __init__(self, swarm: str, round_seconds: float, max_round_lag: int):
        self.swarm = swarm
        self.round_seconds = round_seconds
        self.max_round_lag = max_round_lag
        self._serializer = DHTProtocol.serializer
        self._reserved = set(DHTProtocol.RESERVED_SUBKEYS)
        self._peers_key = self._key_id(_peers_key(swarm))
        self._round_of: dict[bytes, int] = {}
        self._span: tuple[int, int] = (0, -1)

    @staticmethod
    def _key_id(raw: str) -> bytes:
        return DHTID.generate(source=raw).to_bytes()

    def _refresh(self, now: float) -> None:
        current = int(now // self.round_seconds)
        lo = current - self.max_round_lag - 2
        hi = current + int((MAX_RECORD_TTL_S + 2 * _CLOCK_SLACK_S) // self.round_seconds) + 2
        if (lo, hi) == self._span:
            return
        _, old_hi = self._span
        self._round_of = {k: r for k, r in self._round_of.items() if r >= lo}
        for r in range(max(lo, old_hi + 1), hi + 1):
            self._round_of[self._key_id(_round_key(self.swarm, r))] = r
        self._span = (lo, hi)

    def _round_expiry_cap(self, round: int) -> float:
        """The latest expiration a round's entry may have: ROUND_ENTRY_ROUNDS rounds after the
        round began, plus the clock slack. A swarm-wide constant, not this node's own
        max_round_lag: a replica that refuses what a reader accepts (or the reverse) drops its
        whole reply for the key (hivemind validates a dictionary as one), so every node must draw
        the line in the same place. max_round_lag ≤ 28 keeps honest entries (published for
        max_round_lag + 2 rounds) inside it."""
        return (round + ROUND_ENTRY_ROUNDS) * self.round_seconds + _CLOCK_SLACK_S

    def validate(self, record: DHTRecord) -> bool:
        now = get_dht_time()
        if record.expiration_time > now + MAX_RECORD_TTL_S + _CLOCK_SLACK_S:
            return False
        self._refresh(now)
        is_peers = record.key == self._peers_key
        if not is_peers and record.key not in self._round_of:
            return True  # not one of this swarm's keys
        if record.subkey in self._reserved:
            return False  # a plain value would replace every peer's entry
        try:
            subkey = self._serializer.loads(record.subkey)
            value = self._serializer.loads(record.value)
        except Exception:  # noqa: BLE001 - hostile bytes
            return False
        if not (isinstance(subkey, str) and PEER_ID_RE.fullmatch(subkey)):
            return False
        if is_peers:
            return isinstance(value, bytes) and len(value) <= MAX_ANNOUNCEMENT_SIZE
        if record.expiration_time > self._round_expiry_cap(self._round_of[record.key]):
            return False
        return (isinstance(value, dict) and set(value) == {"p2p", "size", "sha256"}
                and isinstance(value["p2p"], str) and len(value["p2p"]) <= 128
                and type(value["size"]) is int and 0 <= value["size"] <= MAX_ENVELOPE_SIZE
                and isinstance(value["sha256"], str) and _SHA256_RE.fullmatch(value["sha256"]) is not None)


def swarm_validator(swarm: str, round_seconds: float, max_round_lag: int,
                    signer: Identity | None) -> CompositeValidator:
    """A node's record validator: owner signatures first (signing its own records with
    ``signer``), then this swarm's schema and expiry rules on the unwrapped value."""
    return CompositeValidator([OwnerSignatureValidator(signer),
                               SwarmRecordValidator(swarm, round_seconds, max_round_lag)])


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
    round_seconds: float = 5.0  # for the record validator: which DHT keys are this swarm's rounds
    max_round_lag: int = 4
    on_retry: Optional[Callable[[str], None]] = field(default=None, repr=False)  # join attempts, for status
    signer: Optional[Identity] = field(default=None, repr=False)  # signs our DHT records; its peer id is ours
    _node: object = field(default=None, init=False, repr=False)
    _outbox: dict = field(default_factory=dict, init=False, repr=False)  # round -> (bytes, expires_at)
    _seen: dict = field(default_factory=dict, init=False, repr=False)  # round -> {(publisher, sha)}
    _failures: dict = field(default_factory=dict, init=False, repr=False)  # (round, publisher, sha) -> n
    _heard: dict = field(default_factory=dict, init=False, repr=False)  # publisher -> last heartbeat sha
    _inflight: dict = field(default_factory=dict, init=False, repr=False)  # (round, publisher, sha) -> task
    _ready: list = field(default_factory=list, init=False, repr=False)  # fetched, not yet returned
    _serving: asyncio.Semaphore = field(default_factory=lambda: asyncio.Semaphore(MAX_CONCURRENT_SERVES),
                                        init=False, repr=False)
    maddrs: list = field(default_factory=list, init=False)
    fetch_failures: int = field(default=0, init=False)  # bodies given up on (peer gone, cut off)
    store_unconfirmed: int = field(default=0, init=False)
    refused_requests: int = field(default=0, init=False)  # fetches of ours naming another publisher
    backed_off: int = field(default=0, init=False)  # back-offs of publishers whose bodies failed
    _strikes: dict = field(default_factory=dict, init=False, repr=False)  # publisher -> failures
    _backoff: dict = field(default_factory=dict, init=False, repr=False)  # publisher -> skip until round

    async def start(self, retries: int | None = None) -> None:
        if self.signer is None or self.signer.peer_id != self.publisher:
            raise TransportError("the hivemind transport needs the publisher's identity (signer) to sign "
                                 "its DHT records; its peer id must be the publisher")
        self._node = await start_dht_node(
            initial_peers=self.initial_peers, host_maddrs=self.host_maddrs,
            announce_maddrs=self.announce_maddrs, identity_path=self.p2p_identity_path,
            startup_timeout=self.startup_timeout, retries=self.join_retries if retries is None else retries,
            backoff=self.join_backoff, use_relay=self.use_relay, nat_port_map=self.nat_port_map,
            record_validator=swarm_validator(self.swarm, self.round_seconds, self.max_round_lag, self.signer),
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
        await self.start(retries=0)  # the caller (node/link.py) owns the back-off between tries
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
                    # never serve our body for it, so junk entries cannot spend our upload.
                    self.refused_requests += 1
                    return
                data = self._outbox.get(round, (b"", 0))[0]
                writer.write(_U64.pack(len(data)))
                writer.write(data)  # no concatenated copy of a body of up to 4 MiB
                await asyncio.wait_for(writer.drain(), FETCH_TIMEOUT_S)
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
        record = {"p2p": self.p2p_peer_id, "size": len(data), "sha256": hashlib.sha256(data).hexdigest()}
        ok = await self._node.store(_round_key(self.swarm, round), record, now + expires_in, subkey=publisher)
        if not ok:
            # hivemind reports the answer of whichever replica answered last, so False means "some
            # replica refused or did not answer" (routine while a dead peer is still in routing
            # tables), not that no one holds the record. Counted, not raised.
            self.store_unconfirmed += 1
            log.debug("round %d: a DHT replica did not confirm the index record", round)

    # -- fetching peers' envelopes ---------------------------------------------------------------
    async def poll(self, rounds: Iterable[int]) -> list[Delivery]:
        rounds = list(rounds)
        oldest = min(rounds) if rounds else 0
        for old in [r for r in self._seen if r < oldest]:
            del self._seen[old]
        self._failures = {k: v for k, v in self._failures.items() if k[0] >= oldest}
        self._backoff = {p: until for p, until in self._backoff.items() if until >= oldest}
        # One traversal for the whole window: sequential gets cost one DHT search per round.
        # sufficient_expiration_time=inf is what get(latest=True) does: ask until the newest is found.
        round_of = {_round_key(self.swarm, r): r for r in rounds}
        found_by_key = (await self._node.get_many(list(round_of), sufficient_expiration_time=float("inf"))
                        if round_of else {})
        started = []
        for dht_key, r in round_of.items():
            found = found_by_key.get(dht_key)
            if found is None or not isinstance(found.value, dict):
                continue
            seen = self._seen.setdefault(r, set())
            entries = list(found.value.items())
            random.shuffle(entries)  # many junk entries must not always crowd out the same honest ones
            for publisher, entry in entries:
                record = getattr(entry, "value", None)
                if publisher == self.publisher or not isinstance(publisher, str) or not self._valid_index(record):
                    continue
                if self._backoff.get(publisher, -1) >= r:
                    continue  # its last body failed verification: not fetched for a while
                ident = (r, publisher, record["sha256"])
                if ident[1:] in seen or ident in self._inflight:
                    continue
                if record["size"] > MAX_ENVELOPE_SIZE:
                    seen.add(ident[1:])
                    self.rejected["oversized"] += 1
                    continue
                if len(self._inflight) >= MAX_INFLIGHT_FETCHES:
                    break  # bounded memory; the rest is fetched by later polls
                task = asyncio.create_task(self._fetch(r, publisher, record))
                self._inflight[ident] = task
                started.append(task)
        if started:  # fast fetches come back in this poll; a stalling peer cannot hold it long
            await asyncio.wait(started, timeout=FETCH_WAIT_S)
        ready, self._ready = self._ready, []
        return ready

    @staticmethod
    def _valid_index(record: object) -> bool:
        return (isinstance(record, dict) and isinstance(record.get("p2p"), str)
                and isinstance(record.get("size"), int) and isinstance(record.get("sha256"), str)
                and len(record["sha256"]) == 64)

    async def _fetch(self, round: int, publisher: str, record: dict) -> None:
        """Download one body in the background; a verified-size, hash-matching one goes to
        ``_ready`` for the next ``poll`` to return."""
        ident = (publisher, record["sha256"])
        try:
            data = await asyncio.wait_for(self._download(PeerID.from_base58(record["p2p"]), round, publisher),
                                          FETCH_TIMEOUT_S)
        except _Oversized:
            self._seen.setdefault(round, set()).add(ident)
            self.rejected["oversized"] += 1
            self._back_off(publisher, round)
            return
        except asyncio.CancelledError:
            raise
        except Exception as e:  # noqa: BLE001 - a peer that vanished mid-transfer is routine
            n = self._failures[(round, *ident)] = self._failures.get((round, *ident), 0) + 1
            if n >= MAX_FETCH_FAILURES:
                self._seen.setdefault(round, set()).add(ident)
                self.fetch_failures += 1
            log.debug("fetching round %d from %s failed (%d/%d): %s: %s", round, publisher, n,
                      MAX_FETCH_FAILURES, type(e).__name__, e)
            return
        finally:
            self._inflight.pop((round, *ident), None)
        self._seen.setdefault(round, set()).add(ident)
        if hashlib.sha256(data).hexdigest() != record["sha256"]:
            self.rejected["hash_mismatch"] += 1
            self._back_off(publisher, round)
            return
        self._strikes.pop(publisher, None)  # a body that verifies ends its back-off record
        self._ready.append(Delivery(round, publisher, data))

    def _back_off(self, publisher: str, round: int) -> None:
        """Skip a publisher whose body failed verification for the next rounds, twice as long at
        each new failure: its entries cost a fetch each, and its key signed them."""
        k = self._strikes[publisher] = self._strikes.get(publisher, 0) + 1
        if len(self._strikes) > 4096:  # keys are free: forget the oldest strikes, not memory
            self._strikes.pop(next(iter(self._strikes)))
        self._backoff[publisher] = round + min(MAX_BACKOFF_ROUNDS, BACKOFF_ROUNDS * 2 ** (k - 1))
        self.backed_off += 1

    async def _download(self, peer, round: int, publisher: str) -> bytes:
        _, reader, writer = await self._node.p2p.call_binary_stream_handler(peer, _handler_name(self.swarm))
        try:
            name = publisher.encode("ascii")
            writer.write(_U64.pack(round) + bytes([len(name)]) + name)
            await writer.drain()
            (size,) = _U64.unpack(await reader.readexactly(_U64.size))
            if size > MAX_ENVELOPE_SIZE:  # refuse before buffering a byte of it
                raise _Oversized(size)
            if size == 0:
                raise LookupError("the publisher no longer holds this round")
            return await reader.readexactly(size)
        finally:
            writer.close()

    # -- heartbeats: small signed envelopes stored in the DHT itself ---------------------------
    async def announce(self, data: bytes, expires_in: float) -> None:
        if len(data) > MAX_ANNOUNCEMENT_SIZE:
            raise ValueError(f"announcement of {len(data)} bytes is over the {MAX_ANNOUNCEMENT_SIZE}-byte limit")
        if not await self._node.store(_peers_key(self.swarm), bytes(data), get_dht_time() + expires_in,
                                      subkey=self.publisher):
            self.store_unconfirmed += 1

    async def poll_announcements(self) -> list[Delivery]:
        found = await self._node.get(_peers_key(self.swarm), latest=True)
        entries = found.value if found is not None and isinstance(found.value, dict) else {}
        self._heard = {p: h for p, h in self._heard.items() if p in entries}
        out = []
        for publisher, entry in entries.items():
            data = getattr(entry, "value", None)
            if publisher == self.publisher or not isinstance(publisher, str):
                continue
            if not isinstance(data, bytes) or len(data) > MAX_ANNOUNCEMENT_SIZE:
                if self._heard.get(publisher, b"") is not None:  # count a bad entry once
                    self.rejected["oversized" if isinstance(data, bytes) else "malformed_envelope"] += 1
                self._heard[publisher] = None
                continue
            digest = hashlib.sha256(data).digest()
            if self._heard.get(publisher) != digest:
                self._heard[publisher] = digest
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

    def info(self) -> dict:
        info = {"transport": "hivemind", "maddrs": self.maddrs, "fetch_failures": self.fetch_failures,
                "store_unconfirmed": self.store_unconfirmed, "refused_requests": self.refused_requests,
                "backed_off": self.backed_off}
        if self._node is not None:
            info["routing_peers"] = len(self._node.protocol.routing_table.uid_to_peer_id)
        return info


class _Oversized(Exception):
    def __init__(self, size: int):
        super().__init__(f"declared {size} bytes")
