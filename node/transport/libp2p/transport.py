"""The py-libp2p transport: rollout envelopes and heartbeats over gossipsub, no daemon to start.

hivemind needs its Go daemon (p2pd); this transport is a pure-Python libp2p host
(node/transport/libp2p/host.py, on trio in its own thread) that speaks to other swarm-node
hosts only. It carries the same signed envelopes as every transport:

    gossip topic                     message                       validator (before forwarding)
    swarm-node/<swarm>/rollouts      [round, envelope]             the node's whole admission check
                                     [round, size, sha256, addr]   a body too large for gossip: a
                                                                   pointer, fetched from addr
    swarm-node/<swarm>/peers         a signed Announcement          the node's heartbeat check

- **The publisher is authenticated by libp2p.** Pubsub's strict signing puts the origin's key
  and signature on every message, and the origin's key is its swarm identity's
  (``publisher_of``), so an envelope signed by anyone else is ``sender_mismatch`` and a copy of
  another's envelope under a new origin is refused as that.
- **A bad message does not propagate.** The topic validator runs the node's own admission checks
  (``set_gate``: signature, clock, replay, schema, tokens, log-probs; node/swarm/exchange.py) in a worker
  thread before gossipsub forwards or delivers anything; what fails is counted under the same
  reasons as over hivemind and goes no further than this node. Message ids are the sha256 of
  origin and data, so a duplicate is dropped by gossipsub's seen cache before it costs a check.
- **A flood costs a bounded amount.** Before that check, a budget (node/transport/libp2p/budget.py)
  decides in microseconds whether a message is worth one: two bodies a round and a heartbeat
  every 0.5 s per publisher (none for one not newer than its last accepted: a replay), and
  publishers with no admitted history (``admitted`` in 3 rounds) share 20 checks a second. What it
  refuses is counted (``strangers_over_budget``, ``republished``, ``heartbeat_rate``,
  ``heartbeat_replay``) and not forwarded.
- **Bodies above the gossip limit** (1 MiB, ``GOSSIP_MAX``: a 4 MiB envelope is allowed) are
  announced by a pointer and fetched over a libp2p stream from the publisher: by its peer id
  when this host is connected to it, else at the address the pointer names, which must end in
  the publisher's own /p2p/ id. The body must hash to the pointer's sha256 (``hash_mismatch``) and
  then passes every check as any other. At most ``MAX_FETCHES`` fetches run at once, one per
  publisher, and publishers with no admitted history hold at most half of them; a node serves
  each of its large bodies at most twice to one peer and 16 times in all to peers with no
  admitted history (node/transport/libp2p/serving.py).
- **Joining**: the bootstrap addresses, then the peers this node verified before (its peer cache;
  node/transport/join.py decides, as for hivemind); peer exchange finds the rest of the swarm
  from whichever answered (``found_via``).
- Incoming bodies and heartbeats wait for the node's poll in the ``Inbox`` every push carrier
  shares (node/transport/inbox.py); gossip keeps nothing for late joiners: a node that joins
  mid-round gets the next rounds.

A node on libp2p and a node on hivemind or MQTT are in different swarms, even with the same
``swarm.name``: their carriers do not meet (docs/architecture.md, "Carriers").
"""

from __future__ import annotations

import asyncio
import collections
import hashlib
import logging
import time
from dataclasses import dataclass, field
from typing import Callable, Iterable, Optional

import msgpack

from swarm_node.node.clock import RoundClock
from swarm_node.node.transport.addresses import peer_id_of, with_peer
from swarm_node.node.transport.backoff import JOIN_BACKOFF_S, JOIN_RETRIES, TryAgain, retry
from swarm_node.node.transport.carrier import CarrierError
from swarm_node.node.transport.libp2p.carrier import Libp2pCarrier
from swarm_node.node.transport.base import MAX_ANNOUNCEMENT_SIZE, MAX_ENVELOPE_SIZE, Delivery, Transport, TransportError
from swarm_node.node.transport.libp2p.budget import CheckBudget
from swarm_node.node.transport.inbox import Inbox
from swarm_node.node.transport.libp2p.frames import (bodies_protocol, gossip_topics, parse_frame, publisher_of_address,  # noqa: F401
                                          publisher_of_remote, signed_at)
from swarm_node.node.transport.libp2p.host import GOSSIP_MAX, Libp2pHost
from swarm_node.node.transport.libp2p.serving import Serves
from swarm_node.node.transport.join import join_swarm
from swarm_node.node.transport.libp2p.trio_bridge import BridgeClosed
from swarm_node.protocol.identity import Identity

log = logging.getLogger(__name__)

__all__ = ["Libp2pTransport", "gossip_topics", "bodies_protocol", "GOSSIP_BODY_MAX"]

GOSSIP_BODY_MAX = GOSSIP_MAX - 8 * 1024  # an envelope above this goes as a pointer (framing and pubsub's fields fit in the rest)
MAX_BUFFERED = 64 * 1024 * 1024  # bytes of incoming bodies held before polls take them
MAX_FETCHES = 8  # pointer bodies fetched at once (one per publisher); more are dropped (counted fetch_dropped)
FETCH_TIMEOUT_S = 10.0
KEEP_MINE = 16  # our own large bodies kept to serve (rounds: more than a node polls)
OK, MISSING = 0, 1


@dataclass
class Libp2pTransport(Transport):
    identity: Identity | None = None
    listen: list = field(default_factory=lambda: ["/ip4/0.0.0.0/tcp/0"])
    bootstrap: list = field(default_factory=list)
    announce_addrs: list = field(default_factory=list)  # addresses peers reach this host at (else the listen ones)
    startup_timeout: float = 30.0
    join_retries: int = JOIN_RETRIES
    join_backoff: float = JOIN_BACKOFF_S
    on_retry: object = None  # callable(str): a join attempt failed and will be retried
    target_peers: int = 8
    round_seconds: float | None = None  # the shared clock's: rounds far past it are not worth a check
    max_buffered: int = MAX_BUFFERED
    # Peers verified before (node/swarm/peer_cache.py): tried when no bootstrap answers (node/transport/join.py).
    fallback_peers: Optional[Callable[[], list[str]]] = field(default=None, repr=False)
    found_via: str = field(default="", init=False)  # bootstrap, peer cache or new swarm: how the join found it
    host: Libp2pHost | None = field(default=None, init=False)
    counts: collections.Counter = field(default_factory=collections.Counter, init=False)
    inbox: Inbox = field(default=None, init=False)
    _gate: Callable | None = field(default=None, init=False)
    _budget: CheckBudget = field(default_factory=CheckBudget, init=False)  # the trio thread's
    _serves: Serves = field(default_factory=Serves, init=False)  # how often our large bodies were served
    _mine: dict = field(default_factory=dict, init=False)  # round -> our body too large for gossip
    _fetching: dict = field(default_factory=dict, init=False)  # (publisher, round) -> task
    _bodies: Libp2pCarrier | None = field(default=None, init=False)

    def __post_init__(self):
        if self.identity is None or self.identity.peer_id != self.publisher:
            raise TransportError("the libp2p transport needs the node's identity: its key is the libp2p host's")
        self.inbox = Inbox(self.max_buffered, self.counts, self.rejected)
        self._clock = RoundClock(self.round_seconds) if self.round_seconds else None
        self._rollouts, self._peers = gossip_topics(self.swarm)

    def set_gate(self, gate: Callable[[Delivery], bool] | None) -> None:
        self._gate = gate

    # -- joining ----------------------------------------------------------------------------------
    async def start(self) -> None:
        self.host = Libp2pHost(self.identity, self.listen, self.bootstrap, announce=self.announce_addrs,
                               target_peers=self.target_peers)
        await self.host.start(self.startup_timeout)
        try:
            await self.host.subscribe(self._rollouts, self._on_rollout, self._check_rollout, self._afford_rollout)
            await self.host.subscribe(self._peers, self._on_heartbeat, self._check_heartbeat, self._afford_heartbeat,
                                      self._heartbeat_checked)
            self._bodies = Libp2pCarrier(self.host, bodies_protocol(self.swarm))
            await self._bodies.start(self._serve_body)
            await self._join()
            log.info("libp2p host %s listening on %s (the node key's libp2p id; swarm peer id %s)",
                     self.host.peer_id, ", ".join(self.host.addrs), self.publisher)
            if not self.announce_addrs and all("/ip4/127.0.0.1/" in a or "/ip6/::1/" in a for a in self.host.addrs) \
                    and not all("/ip4/127.0.0.1/" in a or "/ip6/::1/" in a for a in self.listen):
                log.warning("listening on a wildcard address: peers on other machines cannot fetch this node's "
                            "large bodies until --swarm.announce_maddrs names an address they can reach")
        except BaseException:
            await self.host.close()
            raise

    async def _join(self) -> None:
        # The bootstraps, then the peer cache: the decision every carrier that joins through peers shares.
        _, self.found_via = await join_swarm(self._dial, self.bootstrap, self.fallback_peers, self.join_retries,
                                             self.join_backoff, self.on_retry)

    async def _dial(self, addrs: list[str], retries: int) -> None:
        """Dial ``addrs`` until one answers, ``retries`` more times with back-off; peer exchange
        finds the rest of the swarm from there (node/transport/libp2p/peer_exchange.py)."""
        if not addrs:
            return  # the first node of a new swarm

        async def dial() -> None:
            if not await self.host.bridge.call(self.host.connect, addrs):
                raise TryAgain("no bootstrap peer answered" if addrs == self.bootstrap else "no cached peer answered")

        def retrying(attempt: int, failure: TryAgain, delay: float) -> None:
            msg = f"{failure} (attempt {attempt + 1}/{retries + 1}); retrying in {delay:g} s"
            log.warning("%s", msg)
            if callable(self.on_retry):
                self.on_retry(msg)

        try:
            await retry(dial, retries=retries, first_delay=self.join_backoff, before_wait=retrying)
        except TryAgain:
            if addrs != self.bootstrap:
                raise TransportError(f"none of them answered ({', '.join(addrs)})") from None
            raise TransportError(f"none of the bootstrap peers {self.bootstrap} answered after {retries + 1} "
                                 f"attempts: check the addresses (as `swarm-node bootstrap --transport libp2p` prints "
                                 f"them) and that their port is reachable from here") from None

    # -- sending ----------------------------------------------------------------------------------
    async def publish(self, round: int, data: bytes, expires_in: float) -> None:
        if len(data) > MAX_ENVELOPE_SIZE:
            raise ValueError(f"envelope of {len(data)} bytes is over the {MAX_ENVELOPE_SIZE}-byte limit")
        if len(data) <= GOSSIP_BODY_MAX:
            frame = msgpack.packb([round, bytes(data)])
        else:
            self._mine[round] = bytes(data)
            while len(self._mine) > KEEP_MINE:
                del self._mine[min(self._mine)]
            self._serves.keep_only(self._mine)
            frame = msgpack.packb([round, len(data), hashlib.sha256(data).digest(), self.host.addrs[0]])
        await self.host.publish(self._rollouts, frame)
        self.counts["published"] += 1

    async def announce(self, data: bytes, expires_in: float) -> None:
        if len(data) > MAX_ANNOUNCEMENT_SIZE:
            raise ValueError(f"heartbeat of {len(data)} bytes is over the {MAX_ANNOUNCEMENT_SIZE}-byte limit")
        await self.host.publish(self._peers, bytes(data))

    async def _serve_body(self, remote: str, request: bytes):
        try:
            (round,) = msgpack.unpackb(request)
            round = int(round)
        except Exception:  # noqa: BLE001 - a malformed request gets nothing
            return MISSING, b""
        body = self._mine.get(round)
        settle = None if body is None else self._serves.take(
            remote, round, self.inbox.is_vouched(publisher_of_remote(remote)), len(body))
        if settle is None:
            self.counts["serves_refused"] += body is not None
            return MISSING, b""  # a peer asking again and again, or ids by the hundred, are not all served
        return OK, body, settle  # charged by what the carrier wrote (a reset stream costs what it took)

    # -- the budgets (the trio thread, before a check is paid for) ----------------------------------
    def _afford_rollout(self, publisher: str, data: bytes) -> bool:
        frame = parse_frame(data)
        if frame is None:
            return self._refuse("rejected", "malformed_envelope")
        # Bounded around the shared clock's round (the sender's claim past it is wrong); without a
        # clock, around the newest round polled, which may lag: then too far ahead is not its fault.
        window = self.inbox.window
        newest = (self._clock.current() if self._clock is not None else window[1] if window else None)
        why = self._budget.body(publisher, frame[0], self.inbox.is_vouched(publisher), time.monotonic(), newest)
        if why is None:
            return True
        return self._refuse("rejected" if why == "wrong_round" and self._clock is not None else "counts", why)

    def _afford_heartbeat(self, publisher: str, data: bytes) -> bool:
        why = self._budget.heartbeat(publisher, self.inbox.is_vouched(publisher), time.monotonic(), signed_at(data))
        return True if why is None else self._refuse("counts", why)

    def _heartbeat_checked(self, publisher: str, data: bytes, ok: bool) -> None:
        self._budget.heartbeat_checked(publisher, signed_at(data), ok)

    # -- the validators (worker threads: before gossipsub forwards anything) ------------------------
    def _check_rollout(self, publisher: str, data: bytes) -> bool:
        # The poll window is not checked here: a node that polls late must still forward what its
        # neighbours are on (the budget bounds how far ahead); the inbox keeps only its window.
        frame = parse_frame(data)
        if frame is None:
            return self._refuse("rejected", "malformed_envelope")
        round, body, pointer = frame
        if body is not None:
            if len(body) > MAX_ENVELOPE_SIZE:
                return self._refuse("rejected", "oversized")
            return self._gate is None or self._gate(Delivery(round, publisher, body))
        size, _, addr = pointer
        if not 0 < size <= MAX_ENVELOPE_SIZE:
            return self._refuse("rejected", "oversized")
        # The body is fetched from the address the pointer names: it must be the publisher's own,
        # or a pointer would turn every node into a fetcher aimed at someone else.
        if publisher_of_address(addr) != publisher:  # None: no /p2p/ id, or not an Ed25519 key
            return self._refuse("rejected", "sender_mismatch")
        return True

    def _check_heartbeat(self, publisher: str, data: bytes) -> bool:
        if len(data) > MAX_ANNOUNCEMENT_SIZE:
            return self._refuse("rejected", "oversized")
        return self._gate is None or self._gate(Delivery(-1, publisher, data))

    def _refuse(self, counter: str, reason: str) -> bool:
        """Count a refusal on the loop (validators run in worker threads); False."""
        self.host.bridge.to_loop(getattr(self, counter).update, (reason,))
        return False

    # -- receiving (the asyncio loop) -------------------------------------------------------------
    def _on_rollout(self, publisher: str, data: bytes) -> None:
        frame = parse_frame(data)
        if frame is None:
            return
        round, body, pointer = frame
        if body is not None:
            self.inbox.offer(publisher, round, body)
        else:
            self._fetch_later(publisher, round, *pointer)

    def _on_heartbeat(self, publisher: str, data: bytes) -> None:
        self.inbox.offer_heartbeat(publisher, data)

    def _fetch_later(self, publisher: str, round: int, size: int, digest: bytes, addr: str) -> None:
        if size > self.inbox.max_size:
            self.rejected["oversized"] += 1  # more than this node could use: not fetched
            return
        key = (publisher, round)
        if key in self._fetching:
            return
        strangers = sum(not self.inbox.is_vouched(p) for p, _ in self._fetching)
        if (len(self._fetching) >= MAX_FETCHES or any(p == publisher for p, _ in self._fetching)
                or (not self.inbox.is_vouched(publisher) and strangers >= MAX_FETCHES // 2)):
            self.counts["fetch_dropped"] += 1
            return
        task = asyncio.ensure_future(self._fetch(publisher, round, size, digest, addr))
        self._fetching[key] = task
        task.add_done_callback(lambda _: self._fetching.pop(key, None))

    async def _fetch(self, publisher: str, round: int, size: int, digest: bytes, addr: str) -> None:
        # By peer id where connected: the pointer's address is the publisher's claim (its IP may be
        # anyone's); the /p2p/ id in it is checked, and noise proves it on any dial.
        peer = peer_id_of(addr)
        try:
            if peer is not None and await self.host.is_connected(peer):
                addr = with_peer("", peer)  # the bare /p2p/<id>
        except BridgeClosed:
            return  # the host is closing
        try:
            # The whole fetch at 1 MB/s at least: a sender that trickles must not hold a slot for a minute.
            status, body = await asyncio.wait_for(
                self._bodies.call(addr, msgpack.packb([round]), max_reply=size, timeout=FETCH_TIMEOUT_S),
                FETCH_TIMEOUT_S + size / 1e6)
        except asyncio.TimeoutError:
            self.counts["fetch_failed"] += 1
            log.debug("fetching round %d from %s: too slow", round, publisher)
            return
        except CarrierError as e:
            self.counts["fetch_failed"] += 1
            log.debug("fetching round %d from %s: %s", round, publisher, e)
            return
        if status != OK:
            self.counts["fetch_failed"] += 1
            return
        if hashlib.sha256(body).digest() != digest:
            self.rejected["hash_mismatch"] += 1
            self.distrust(publisher, round)
            return
        self.counts["fetched"] += 1
        self.inbox.offer(publisher, round, body)

    async def poll(self, rounds: Iterable[int], want: int | None = None,
                   max_size: int | None = None) -> list[Delivery]:
        rounds = sorted(set(rounds))
        self.inbox.set_window(rounds, max_size)
        return self.inbox.take(rounds)

    async def poll_announcements(self) -> list[Delivery]:
        return self.inbox.take_heartbeats()

    def admitted(self, publisher: str, round: int) -> None:
        self.inbox.vouch(publisher, round)

    def is_own_address(self, publisher: str, addr: str) -> bool:
        # The host's key is the node's: an address is the publisher's own only if its /p2p/ id is its key.
        return publisher_of_address(addr) == publisher

    async def broadcast_parts(self, identity, source: str, upload):
        from swarm_node.node.transport.libp2p.carrier import weights_protocol
        from swarm_node.node.transport.libp2p.directory import Libp2pWeightDirectory

        directory = Libp2pWeightDirectory(self, identity, source)
        await directory.start()
        return Libp2pCarrier(self.host, weights_protocol(self.swarm), upload), directory

    # -- the rest ---------------------------------------------------------------------------------
    def alive(self) -> bool:
        return self.host is None or self.host.alive()

    async def close(self) -> None:
        tasks = list(self._fetching.values())
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        if self._bodies is not None:
            await self._bodies.close()
        if self.host is not None:
            await self.host.close()

    def info(self) -> dict:
        host = self.host.info() if self.host is not None else {}
        # maddrs: what the node's heartbeats give peers (its peer cache's entries, node/swarm/peer_cache.py)
        return {"transport": "libp2p", **host, "maddrs": host.get("addrs", []), "found_via": self.found_via,
                "peers_heard": self.inbox.heard(),
                "mesh": self.host.mesh_peers(self._rollouts) if self.host is not None else 0,
                **({"other_swarms": others} if (others := self.other_swarms()) else {}),
                **{f"libp2p_{k}": v for k, v in sorted(self.counts.items())}}

    def other_swarms(self) -> list[str]:
        """The swarm names of connected peers' rollout topics other than this node's: peers started
        with another ``--swarm.name`` (node/run/swarm_watch.py names them)."""
        topics = self.host.topics_of_peers() if self.host is not None else set()
        return sorted(t.split("/")[1] for t in topics
                      if t != self._rollouts and t.startswith("swarm-node/") and t.endswith("/rollouts")
                      and t.count("/") == 2)

    def buffer_sizes(self) -> dict[str, int]:
        return {"mine": len(self._mine), "fetching": len(self._fetching), **self.inbox.buffer_sizes()}
