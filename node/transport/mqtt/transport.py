"""The MQTT transport: a private cluster's swarm through one broker the team runs.

Every node holds one connection to the broker (node/transport/mqtt/link.py) and exchanges the
same signed envelopes as over hivemind. The broker is a carrier and is never trusted: every body
is checked by the node's verifier (signature, publisher = signer, clock, replay), so the broker
cannot forge, alter or re-attribute a message unnoticed, and a replay is refused as one.

    topic                                              QoS  retained  expiry       payload
    swarm-node/<swarm>/rollouts/<peer id>/<round>/<i>  1    yes       the window   part i of the envelope
    swarm-node/<swarm>/peers/<peer id>                 1    yes       heartbeat    signed Announcement
    swarm-node/<swarm>/probe/<peer id>                 1    no                     the join-time read check

- **QoS 1** for both: a rollout batch or a heartbeat lost on the way costs a round's share, and
  duplicates are free (a body is kept once, by publisher and sha256). QoS 2's extra round trip
  buys nothing a content hash does not.
- **Retained, with an MQTT 5 message expiry**: a node that joins or reconnects mid-run finds the
  rounds still in the staleness window and every live peer's heartbeat at once, and the broker
  drops them when they expire (a round's envelope lives ``expires_in``, as its DHT entry does).
- **Split** (node/transport/mqtt/parts.py) into parts under the broker's packet limit (its
  CONNACK ``Maximum Packet Size``, else ``part_size``), one topic per part so a retained copy
  of each is kept.
- **The publisher is the topic's <peer id>**, a claim like the DHT's subkey: a broker ACL
  (``pattern write swarm-node/+/rollouts/%u/+/+`` and the like, docs/private-cluster.md) makes the broker refuse a
  node writing under another id, and the node refuses a body signed by anyone but the id its
  topic names (``sender_mismatch``) even where the broker has no ACL.

Nothing this node made is lost while the broker is away: every envelope goes into a bounded
queue (``MAX_QUEUED``; the oldest is dropped first) that one sender task publishes in order
whenever the broker is there, so a publish is never cut in half by the node's own timeout. Each
envelope ends as exactly one of ``published``, ``dropped``, ``expired`` (its window passed before
the broker came back), ``replaced`` (a newer envelope of its round) or ``failed`` (refused by the
broker), counted. The newest heartbeat is re-sent at every reconnect.

Incoming is bounded too. A node subscribes to the rollout topics of its window's rounds only
(``.../rollouts/+/<round>/+``, renewed as rounds pass), so retained bodies of other rounds never
reach it; partial bodies are bounded per publisher and by the bytes they hold
(node/transport/mqtt/parts.py); whole bodies and heartbeats wait for the node's poll in the
``Inbox`` every push carrier shares (node/transport/inbox.py: a byte budget in which peers with
an admitted history keep their place, duplicates dropped, a few bodies a round per publisher).
"""

from __future__ import annotations

import asyncio
import collections
import logging
import re
import time
from dataclasses import dataclass, field
from typing import Iterable

from swarm_node.node.transport.backoff import JOIN_BACKOFF_S, JOIN_RETRIES
from swarm_node.node.transport.base import MAX_ANNOUNCEMENT_SIZE, MAX_ENVELOPE_SIZE, Delivery, Transport, TransportError
from swarm_node.node.transport.mqtt.url import BrokerSettings
from swarm_node.node.transport.inbox import MAX_ROUND_AHEAD, Inbox
from swarm_node.node.transport.mqtt.link import BrokerDown, MqttLink
from swarm_node.node.transport.mqtt.parts import NoRoom, PartError, Reassembler, TooLarge, parse_part, split
from swarm_node.protocol.identity import PEER_ID_RE

log = logging.getLogger(__name__)

__all__ = ["MqttTransport", "topic_prefix", "PART_SIZE", "MAX_QUEUED"]

PART_SIZE = 255 * 1024  # a message (with its topic) within the 256 KiB many brokers take; less if the broker says so
MIN_PACKET = 16 * 1024  # a broker allowing less than this is refused at join: 4 MiB would need 300+ parts
MAX_QUEUED = 64  # envelopes (plus the newest heartbeat) kept for the broker while it is away
MAX_BUFFERED = 64 * 1024 * 1024  # bytes of incoming bodies (whole and partial) held before polls take them
CLOSE_FLUSH_S = 3.0  # how long close() lets the sender finish what is queued
_ROUND = re.compile(r"[0-9]{1,12}")
_PART = re.compile(r"[0-9]{1,4}")
_PACKET_SLACK = 512  # a PUBLISH's fixed header, topic and properties, over its payload


def topic_prefix(swarm: str) -> str:
    return f"swarm-node/{swarm}"


@dataclass
class MqttTransport(Transport):
    broker: BrokerSettings | None = None
    connect_timeout: float = 10.0
    join_retries: int = JOIN_RETRIES
    join_backoff: float = JOIN_BACKOFF_S
    part_size: int = PART_SIZE
    max_queued: int = MAX_QUEUED
    max_buffered: int = MAX_BUFFERED
    on_retry: object = None  # callable(str): a join attempt failed and will be retried
    link: MqttLink | None = field(default=None, init=False)
    counts: collections.Counter = field(default_factory=collections.Counter, init=False)
    _queue: collections.deque = field(default_factory=collections.deque, init=False)  # (deadline, round, data)
    _heartbeat: tuple | None = field(default=None, init=False)  # (deadline, data): the newest, re-sent on reconnect
    inbox: Inbox = field(default=None, init=False)  # whole bodies and heartbeats until polled
    _flushing: asyncio.Task | None = field(default=None, init=False)  # the sender (_flush)
    _resend_heartbeat: bool = field(default=False, init=False)
    _inflight: tuple | None = field(default=None, init=False)  # the envelope the sender is publishing
    _sent_parts: dict = field(default_factory=dict, init=False)  # round -> parts of our envelope retained
    _subscribed: set = field(default_factory=set, init=False)  # rounds whose rollout topics we read
    _parts: Reassembler = field(default=None, init=False)
    _probe: asyncio.Event | None = field(default=None, init=False)
    _routes: dict = field(default_factory=dict, init=False)  # topic family -> handler (add_route)

    def __post_init__(self):
        if self.broker is None:
            raise TransportError("the MQTT transport needs a broker (--broker mqtt[s]://[user@]host[:port])")
        self._parts = Reassembler(self.max_buffered // 2)
        self.inbox = Inbox(self.max_buffered // 2, self.counts, self.rejected)
        self._prefix = topic_prefix(self.swarm)

    # -- topics -----------------------------------------------------------------------------------
    def _rollout_topic(self, round: int, i: int) -> str:
        return f"{self._prefix}/rollouts/{self.publisher}/{round}/{i}"

    def _peer_topic(self) -> str:
        return f"{self._prefix}/peers/{self.publisher}"

    def _probe_topic(self) -> str:
        return f"{self._prefix}/probe/{self.publisher}"  # only this node subscribes to it

    # -- joining ----------------------------------------------------------------------------------
    async def start(self) -> None:
        # Rollout topics are read round by round (``poll`` subscribes to the window): retained
        # bodies of rounds a node will never use are never delivered to it.
        subs = [(f"{self._prefix}/peers/+", 1), (self._probe_topic(), 1)]
        self._probe = asyncio.Event()
        self.link = MqttLink(self.broker, self.publisher, subs, self._on_message,
                             connect_timeout=self.connect_timeout, join_retries=self.join_retries,
                             join_backoff=self.join_backoff, on_retry=self.on_retry)
        self.link.on_connect.append(self._on_reconnect)
        await self.link.start()
        limit = self.link.max_packet
        if limit is not None and limit < MIN_PACKET:
            await self.link.close()
            raise TransportError(f"the broker at {self.broker.url} takes packets of at most {limit} bytes: swarm-node "
                                 f"needs {MIN_PACKET} (Mosquitto: max_packet_size)")
        try:
            # An ACL that refuses this node's own topics is a configuration error: say so now, not
            # as rounds that silently never reach anyone. An empty, unretained message is ignored
            # by every receiver.
            for topic in (self._peer_topic(), self._rollout_topic(0, 0)):
                await self.link.publish(topic, b"", qos=1, timeout=self.connect_timeout)
            # Mosquitto grants a subscription its ACL will never deliver on; the only proof that
            # this node can read the swarm is a message of its own coming back.
            await self.link.publish(self._probe_topic(), b"probe", qos=1, timeout=self.connect_timeout)
            try:
                await asyncio.wait_for(self._probe.wait(), self.connect_timeout)
            except asyncio.TimeoutError:
                raise PermissionError(
                    f"the broker at {self.broker.url} did not deliver this node's own probe back within "
                    f"{self.connect_timeout:g} s: its ACL must let user {self.broker.username!r} read "
                    f"{self._prefix}/# (docs/private-cluster.md)") from None
        except PermissionError as e:
            await self.link.close()
            raise TransportError(str(e)) from None
        except BrokerDown as e:
            await self.link.close()
            raise TransportError(f"the broker went away while joining: {e}") from None

    def _on_reconnect(self) -> None:
        self._resend_heartbeat = True
        self._kick()

    def _kick(self) -> None:
        """Start the sender if the link is up and none is running."""
        if self.link is not None and self.link.connected.is_set() and (self._flushing is None or self._flushing.done()):
            self._flushing = asyncio.ensure_future(self._flush())

    # -- sending ----------------------------------------------------------------------------------
    def part_size_now(self) -> int:
        """The most one message's payload may hold: ``part_size``, or less if the broker says so."""
        limit = self.link.max_packet if self.link is not None else None
        return min(self.part_size, limit - _PACKET_SLACK) if limit else self.part_size

    async def _send(self, round: int, data: bytes, deadline: float) -> None:
        """Publish every part (nothing if it expired before it could go), and clear the parts an
        earlier envelope of the round had past this one's count (retained, they would confuse a
        late joiner's reassembly)."""
        left = deadline - time.time()
        if left <= 0:
            self.counts["expired"] += 1
            return
        self._sent_parts[round] = await self.publish_parts(f"{self._prefix}/rollouts/{self.publisher}/{round}", data,
                                                           expiry=left, previous=self._sent_parts.get(round, 0))
        while len(self._sent_parts) > 64:
            del self._sent_parts[min(self._sent_parts)]
        self.counts["published"] += 1

    async def publish(self, round: int, data: bytes, expires_in: float) -> None:
        """Queue the envelope and return: one sender task publishes, in order, whenever the broker
        is there (a publish cut short by the node's own timeout would leave half an envelope)."""
        if len(data) > MAX_ENVELOPE_SIZE:
            raise ValueError(f"envelope of {len(data)} bytes is over the {MAX_ENVELOPE_SIZE}-byte limit")
        self._enqueue((time.time() + expires_in, round, bytes(data)))
        self._kick()

    async def publish_as(self, publisher: str, round: int, data: bytes, expires_in: float) -> None:
        """Write under another node's topic (only simulated adversaries do): a broker with the
        recommended ACL refuses it (``PermissionError``); one without lets it through, and the
        receivers' signature and replay checks must catch it."""
        await self.publish_parts(f"{self._prefix}/rollouts/{publisher}/{round}", data, expiry=expires_in)

    async def publish_parts(self, base: str, body: bytes, *, expiry: float, previous: int = 0) -> int:
        """``body`` retained as parts ``<base>/<i>`` under the broker's limit; the parts an earlier,
        longer body left past this one's count (``previous``) are cleared, since a late joiner
        would take them for a newer body. Returns the count."""
        parts = split(body, self.part_size_now())
        for i, part in enumerate(parts):
            await self.link.publish(f"{base}/{i}", part, qos=1, retain=True, expiry=expiry)
        for i in range(len(parts), previous):
            await self.link.publish(f"{base}/{i}", b"", qos=1, retain=True)
        return len(parts)

    def _enqueue(self, item: tuple) -> None:
        # A republished round replaces its queued envelope (the transport's contract: the newest).
        for i, (_, r, _) in enumerate(self._queue):
            if r == item[1]:
                del self._queue[i]
                self.counts["replaced"] += 1
                break
        self._queue.append(item)
        self.counts["queued"] += 1
        self._trim()

    def _trim(self) -> None:
        while len(self._queue) > self.max_queued:
            self._queue.popleft()
            self.counts["dropped"] += 1

    async def _flush(self) -> None:
        """Send what is queued, oldest first; stops (keeping the rest) if the broker goes away.
        Each envelope ends as exactly one of published, expired, dropped, replaced or failed."""
        if self._resend_heartbeat and self._heartbeat is not None:
            deadline, data = self._heartbeat
            try:
                if deadline > time.time():
                    await self.link.publish(self._peer_topic(), data, qos=1, retain=True, expiry=deadline - time.time())
                self._resend_heartbeat = False
            except BrokerDown:
                return
            except PermissionError as e:
                log.error("%s", e)
        while self._queue:
            item = self._inflight = self._queue.popleft()
            try:
                await self._send(item[1], item[2], item[0])
            except BrokerDown:
                if any(r == item[1] for _, r, _ in self._queue):
                    self.counts["replaced"] += 1  # a newer envelope of the round came meanwhile
                else:
                    self._queue.appendleft(item)  # first again at the reconnect
                    self._trim()
                return
            except (PermissionError, ValueError) as e:  # not worth a retry: the ACL, a broker limit
                self.counts["failed"] += 1
                log.error("publishing round %d: %s", item[1], e)
            finally:
                self._inflight = None

    async def announce(self, data: bytes, expires_in: float) -> None:
        if len(data) > MAX_ANNOUNCEMENT_SIZE:
            raise ValueError(f"heartbeat of {len(data)} bytes is over the {MAX_ANNOUNCEMENT_SIZE}-byte limit")
        self._heartbeat = (time.time() + expires_in, bytes(data))
        try:
            await self.link.publish(self._peer_topic(), data, qos=1, retain=True, expiry=expires_in)
        except BrokerDown:
            pass  # kept in _heartbeat: re-sent on reconnect
        except PermissionError as e:
            raise TransportError(str(e)) from None

    # -- receiving --------------------------------------------------------------------------------
    def _on_message(self, topic: str, payload: bytes) -> None:
        parts = topic.split("/")
        if len(parts) < 4 or "/".join(parts[:2]) != self._prefix:
            self.rejected["bad_topic"] += 1
            return
        kind, publisher = parts[2], parts[3]
        if kind in self._routes:
            self._routes[kind](parts, payload)  # the broadcast's topics: its handler checks them
            return
        if not PEER_ID_RE.fullmatch(publisher):
            self.rejected["bad_topic"] += 1
            return
        if publisher == self.publisher:
            if kind == "probe":
                self._probe.set()
            return  # our own (the broker echoes them)
        if not payload:
            return  # a probe of a topic's ACL, or a cleared retained message
        if kind == "peers" and len(parts) == 4:
            self.inbox.offer_heartbeat(publisher, payload)
        elif kind == "rollouts" and len(parts) == 6 and _ROUND.fullmatch(parts[4]) and _PART.fullmatch(parts[5]):
            self._on_part(publisher, int(parts[4]), payload)
        else:
            self.rejected["bad_topic"] += 1

    async def add_route(self, kind: str, topic_filter: str, handler) -> None:
        """Hand messages of topic family ``kind`` (``swarm-node/<swarm>/<kind>/<peer id>/...``) to
        ``handler(topic parts, payload)``, subscribing to ``topic_filter`` now and after every
        reconnect: the weight broadcast shares this node's one connection (node/broadcast/mqtt_*.py)."""
        if kind in ("rollouts", "peers", "probe"):
            raise ValueError(f"topic family {kind!r} is the transport's own")
        self._routes[kind] = handler
        await self.link.subscribe(topic_filter, 1)

    async def broadcast_parts(self, identity, source: str, upload):
        from swarm_node.node.transport.mqtt.carrier import MqttCarrier
        from swarm_node.node.transport.mqtt.directory import MqttWeightDirectory

        directory = MqttWeightDirectory(self, identity, source)
        await directory.start()
        return MqttCarrier(self, upload), directory

    async def remove_route(self, kind: str, topic_filter: str) -> None:
        self._routes.pop(kind, None)
        if self.link is not None:
            await self.link.unsubscribe(topic_filter)

    def _on_part(self, publisher: str, round: int, payload: bytes) -> None:
        if not self.inbox.in_window(round):
            self.counts["outside_window"] += 1
            return
        try:
            part = parse_part(payload)
            vouched = self.inbox.vouched
            evict = (lambda owner: owner not in vouched) if publisher in vouched else None
            body = self._parts.add((publisher, round), part, self.inbox.max_size,
                                   owner=publisher, may_evict=evict)
        except NoRoom:
            self.counts["buffer_full"] += 1
            return
        except PartError as e:
            self.rejected["oversized" if isinstance(e, TooLarge) else "bad_part"] += 1
            return
        if body is not None:
            self.inbox.offer(publisher, round, body)

    async def poll(self, rounds: Iterable[int], want: int | None = None,
                   max_size: int | None = None) -> list[Delivery]:
        # Bodies are pushed by the broker as they come; ``want`` is a fetch budget, and nothing
        # here is fetched. What arrived is handed over whole.
        rounds = sorted(set(rounds))
        self.inbox.set_window(rounds, max_size)
        if rounds:
            self._parts.forget(lambda slot: self.inbox.in_window(slot[1]))
            await self._follow_rounds(set(range(rounds[0], rounds[-1] + MAX_ROUND_AHEAD + 1)))
        self._parts.expire()
        return self.inbox.take(rounds)

    async def _follow_rounds(self, wanted: set[int]) -> None:
        """Read the rollout topics of ``wanted`` rounds, and no others."""
        if len(wanted) > 64:
            wanted = set(sorted(wanted)[-64:])
        for r in sorted(wanted - self._subscribed):
            await self.link.subscribe(self._rounds_filter(r), 1)
        for r in sorted(self._subscribed - wanted):
            await self.link.unsubscribe(self._rounds_filter(r))
        self._subscribed = wanted

    def _rounds_filter(self, round: int) -> str:
        return f"{self._prefix}/rollouts/+/{round}/+"

    async def poll_announcements(self) -> list[Delivery]:
        return self.inbox.take_heartbeats()

    def admitted(self, publisher: str, round: int) -> None:
        self.inbox.vouch(publisher, round)

    # -- the rest ---------------------------------------------------------------------------------
    async def close(self) -> None:
        if self._flushing is not None and not self._flushing.done():
            # A node that stops sends what it queued if the broker is there: a short, bounded wait.
            await asyncio.wait({self._flushing}, timeout=CLOSE_FLUSH_S)
        if self._flushing is not None:
            self._flushing.cancel()
            await asyncio.gather(self._flushing, return_exceptions=True)
            self._flushing = None
        if self.link is not None:
            await self.link.close()

    def info(self) -> dict:
        link = self.link.info() if self.link is not None else {"broker": self.broker.url, "connected": False}
        waiting = len(self._queue) + (self._inflight is not None)
        # found_via: MQTT nodes meet at the broker (its URL is "broker"), never through cached peers.
        return {"transport": "mqtt", **link, "found_via": "broker", "peers_heard": self.inbox.heard(), "queued": waiting,
                **{f"mqtt_{k}": v for k, v in sorted(self.counts.items())}}

    def buffer_sizes(self) -> dict[str, int]:
        return {"queue": len(self._queue), "partial": len(self._parts), **self.inbox.buffer_sizes()}
