"""One node's connection to an MQTT broker: connect, stay connected, say clearly why not.

Everything a node sends over a private cluster's broker (rollouts, heartbeats, weight manifests
and chunks) goes through one ``MqttLink``: one aiomqtt client (MQTT 5, so the broker can report
a refused publish, expire retained messages and announce its packet limit), one task that owns
it. When the broker goes away the task reconnects with exponential back-off (1 s doubling to
30 s: node/transport/backoff.py) and, once back, subscribes again and calls the ``on_connect`` hooks (the transport flushes
what it queued and re-announces); the node keeps training meanwhile. ``publish`` never waits for
a broker that is down: it raises ``BrokerDown`` and the caller decides what to keep.

Errors the operator can fix are ``TransportError``s that say what to check, and are not retried:
a refused login, a certificate that does not verify, a topic the broker's ACL refuses. An
unreachable broker is retried ``join_retries`` times at start, then reported the same way.

The password comes from a file or the environment (node/transport/mqtt/url.py), never from the
URL, and never appears in a repr, a log line or ``info()``.
"""

from __future__ import annotations

import asyncio
import collections
import logging
import math
import os
import ssl
from typing import Callable

import aiomqtt
from aiomqtt.exceptions import MqttConnectError
from paho.mqtt.packettypes import PacketTypes
from paho.mqtt.properties import Properties

from swarm_node.node.transport.backoff import JOIN_BACKOFF_S, JOIN_RETRIES, Backoff, TryAgain, retry
from swarm_node.node.transport.base import TransportError
from swarm_node.node.transport.mqtt.url import PASSWORD_ENV, BrokerSettings

log = logging.getLogger(__name__)

__all__ = ["BrokerDown", "MqttLink"]

INCOMING_QUEUE = 20000  # messages aiomqtt may hold before the dispatcher reads them (it drops past it)


class BrokerDown(ConnectionError):
    """Not connected to the broker right now (the link is reconnecting)."""


class _Client(aiomqtt.Client):
    """aiomqtt's client, plus what aiomqtt drops: the reason code of a refused publish (an ACL,
    MQTT 5 PUBACK >= 0x80) and the broker's packet limit from its CONNACK; and messages past its
    queue counted, not logged one by one."""

    def __init__(self, *a, **kw):
        super().__init__(*a, **kw)
        self.refused: dict[str, str] = {}  # topic -> reason, until publish() reads it
        self.max_packet: int | None = None
        self.dropped = 0  # incoming messages past INCOMING_QUEUE (the reader fell behind)

    def _on_connect(self, client, userdata, flags, reason_code, properties=None):
        limit = getattr(properties, "MaximumPacketSize", None) if properties is not None else None
        if isinstance(limit, int) and limit > 0:
            self.max_packet = limit
        super()._on_connect(client, userdata, flags, reason_code, properties)

    def _on_message(self, client, userdata, message):
        # aiomqtt logs a warning per message it drops past its queue: a flood would be a log flood.
        try:
            self._queue.put_nowait(aiomqtt.Message._from_paho_message(message))
        except asyncio.QueueFull:
            self.dropped += 1

    def _on_publish(self, client, userdata, mid, reason_code, properties):
        if getattr(reason_code, "is_failure", False):
            msg = self._client._out_messages.get(mid)  # still there: paho pops it after this callback
            if msg is not None:
                self.refused[msg.topic] = str(reason_code)
        super()._on_publish(client, userdata, mid, reason_code, properties)


def _explain_connect(e: BaseException, s: BrokerSettings) -> tuple[str, bool]:
    """(what the operator should read, whether trying again can help)."""
    text = str(e)
    rc = getattr(e, "rc", None)
    value = getattr(rc, "value", rc)
    if isinstance(e, MqttConnectError) and value in (4, 5, 0x86, 0x87, 0x8C):
        who = f"user {s.username!r}" if s.username else "an anonymous client (no user in the URL)"
        return (f"the broker at {s.url} refused the login of {who}: {text}. Check the user in --broker and "
                f"the password (--swarm.broker_password_file or ${PASSWORD_ENV})"), False
    if isinstance(e, MqttConnectError):
        return f"the broker at {s.url} refused the connection: {text}", False
    if "CERTIFICATE_VERIFY_FAILED" in text or "certificate" in text.lower() and "SSL" in text:
        ca = f"the CA file {s.ca_file}" if s.ca_file else "the system's CAs (no --swarm.broker_ca_file)"
        return (f"the broker's TLS certificate at {s.url} did not verify against {ca}: {text}. Give the CA "
                f"that signed the broker's certificate, and a host name the certificate names"), False
    if "SSL" in text or "TLS" in text or "WRONG_VERSION_NUMBER" in text:
        return (f"TLS with the broker at {s.url} failed: {text} (does that port speak TLS? mqtts:// is TLS, "
                f"mqtt:// is not)"), False
    hint = ""
    if any(w in text for w in ("reset by peer", "EOF", "closed", "timed out", "no answer")):
        # A TLS client on a plain port is reset; a plain client on a TLS port is left unanswered.
        hint = (" (is that port plain MQTT? mqtts:// speaks TLS, mqtt:// does not)" if s.tls
                else " (does that port speak TLS? then use mqtts://)")
    return f"cannot reach the broker at {s.url}: {text or type(e).__name__}{hint}", True


class MqttLink:
    """Owns the connection; ``subscriptions`` are (topic filter, QoS), ``on_message(topic, payload)``
    runs for every message (quickly: it is called from the reading task)."""

    def __init__(self, settings: BrokerSettings, client_id: str, subscriptions: list[tuple[str, int]],
                 on_message: Callable[[str, bytes], None], *, connect_timeout: float = 10.0,
                 join_retries: int = JOIN_RETRIES, join_backoff: float = JOIN_BACKOFF_S,
                 on_retry: Callable[[str], None] | None = None):
        self.settings, self.client_id = settings, client_id
        self.subscriptions = list(subscriptions)
        self.on_message = on_message
        self.on_connect: list[Callable[[], None]] = []  # run (synchronously) after each (re)connect
        self.connect_timeout, self.join_retries, self.join_backoff = connect_timeout, join_retries, join_backoff
        self.on_retry = on_retry
        self.connected = asyncio.Event()
        self.reconnects = 0
        self.last_error = ""
        self.counts: collections.Counter = collections.Counter()  # sent, received, refused, ...
        self._client: _Client | None = None
        self._task: asyncio.Task | None = None
        self._closing = False

    # -- connecting -------------------------------------------------------------------------------
    def _tls_context(self) -> ssl.SSLContext | None:
        s = self.settings
        if not s.tls:
            return None
        try:
            ctx = ssl.create_default_context(cafile=s.ca_file or None)
            if s.cert_file:
                ctx.load_cert_chain(s.cert_file, s.key_file or None)
        except (OSError, ssl.SSLError) as e:
            raise TransportError(f"TLS files for {s.url}: {e}") from None
        return ctx

    def _new_client(self) -> _Client:
        s = self.settings
        # A random suffix: a client id is not a secret (here it would be the public peer id), and a
        # broker drops the older of two connections with one id, so anyone could keep a node off the
        # broker by connecting as it. (Mosquitto's use_username_as_clientid does the same broker-side.)
        ident = f"{self.client_id}-{os.urandom(6).hex()}"
        return _Client(s.host, s.port, username=s.username, password=s.password, identifier=ident,
                       protocol=aiomqtt.ProtocolVersion.V5, keepalive=s.keepalive, timeout=self.connect_timeout,
                       tls_context=self._tls_context(), max_queued_incoming_messages=INCOMING_QUEUE,
                       logger=logging.getLogger("swarm_node.node.transport.mqtt.transport.client"))

    async def _connect_once(self, strict: bool = True) -> _Client:
        client = self._new_client()
        try:
            await asyncio.wait_for(client.__aenter__(), self.connect_timeout + 1)
        except asyncio.TimeoutError:
            raise aiomqtt.MqttError(f"no answer within {self.connect_timeout:g} s") from None
        try:
            await self._subscribe(client, strict)
        except BaseException:
            await self._disconnect(client)
            raise
        return client

    async def _subscribe(self, client: _Client, strict: bool = True) -> None:
        if not self.subscriptions:
            return
        subs = list(self.subscriptions)
        codes = await client.subscribe(subs, timeout=self.connect_timeout)
        refused = [(t, str(c)) for (t, _), c in zip(subs, codes) if getattr(c, "is_failure", False)]
        if refused and not strict:  # a reconnect: the link stays up; what it cannot read is logged
            log.error("the broker at %s refused subscriptions %s", self.settings.url, refused)
        elif refused:
            raise _AclRefused(f"the broker at {self.settings.url} refused subscriptions {refused} for "
                              f"user {self.settings.username!r}: its ACL must let this node read them "
                              f"(docs/private-cluster.md)")

    async def subscribe(self, topic: str, qos: int = 1) -> None:
        """Subscribe now (if connected) and after every reconnect."""
        if (topic, qos) not in self.subscriptions:
            self.subscriptions.append((topic, qos))
        client = self._client
        if client is not None and self.connected.is_set():
            try:
                await client.subscribe(topic, qos, timeout=self.connect_timeout)
            except aiomqtt.MqttError as e:  # the link is going down: the reconnect subscribes again
                log.info("subscribing to %s: %s (again at the reconnect)", topic, e)

    async def unsubscribe(self, topic: str) -> None:
        self.subscriptions = [(t, q) for t, q in self.subscriptions if t != topic]
        client = self._client
        if client is not None and self.connected.is_set():
            try:
                await client.unsubscribe(topic, timeout=self.connect_timeout)
            except aiomqtt.MqttError as e:  # the reconnect does not subscribe to it again anyway
                log.info("unsubscribing from %s: %s", topic, e)

    async def start(self) -> None:
        """Connect (retrying an unreachable broker), subscribe, and keep the link up from then on."""
        if self.settings.password and not self.settings.tls:
            log.warning("the broker password goes to %s unencrypted (mqtt://): use mqtts:// where the network "
                        "is not trusted", self.settings.url)

        async def connect() -> _Client:
            try:
                return await self._connect_once()
            except _AclRefused as e:
                raise TransportError(str(e)) from None
            except (aiomqtt.MqttError, OSError) as e:
                why, retry_helps = _explain_connect(e, self.settings)
                if not retry_helps:
                    raise TransportError(why) from None
                raise TryAgain(why) from None

        def retrying(attempt: int, failure: TryAgain, delay: float) -> None:
            log.warning("%s; retrying in %.0f s (%d/%d)", failure, delay, attempt + 1, self.join_retries)
            if self.on_retry:
                self.on_retry(f"broker {self.settings.url}: {failure} (retry {attempt + 1}/{self.join_retries})")

        try:
            self._client = await retry(connect, retries=self.join_retries, first_delay=self.join_backoff,
                                       before_wait=retrying)
        except TryAgain as e:
            raise TransportError(str(e)) from None
        self._closing = False
        self.connected.set()
        self._task = asyncio.create_task(self._run(), name="mqtt-link")

    async def _run(self) -> None:
        waits = Backoff()  # 1 s doubling to 30 s, from the first failure after a connection
        first = True
        while not self._closing:
            client = self._client
            if client is None:
                try:
                    client = self._client = await self._connect_once(strict=False)
                except asyncio.CancelledError:
                    raise
                except Exception as e:  # noqa: BLE001 - every failure is retried; the reason is kept
                    self.last_error = _explain_connect(e, self.settings)[0] if not isinstance(e, _AclRefused) else str(e)
                    wait = waits.next()
                    log.warning("broker still away: %s; next try in %.0f s", self.last_error, wait)
                    await asyncio.sleep(wait)
                    continue
                self.reconnects += 1
                log.info("reconnected to the broker at %s (reconnect %d)", self.settings.url, self.reconnects)
            waits.reset()
            self.connected.set()
            if not first:
                for hook in self.on_connect:
                    try:
                        hook()
                    except Exception:  # noqa: BLE001 - a hook's bug must not take the link down
                        log.exception("an on_connect hook failed")
            first = False
            try:
                async for message in client.messages:
                    self.counts["received"] += 1
                    try:
                        self.on_message(str(message.topic), bytes(message.payload or b""))
                    except Exception:  # noqa: BLE001 - one bad message must not stop the reading
                        self.counts["handler_error"] += 1
                        log.exception("handling a message on %s failed", message.topic)
            except asyncio.CancelledError:
                raise
            except aiomqtt.MqttError as e:
                self.last_error = str(e)
                if not self._closing:
                    log.warning("lost the broker at %s: %s; reconnecting", self.settings.url, e)
            self.connected.clear()
            self._client = None
            await self._disconnect(client)

    @staticmethod
    async def _disconnect(client: _Client) -> None:
        try:
            await asyncio.wait_for(client.__aexit__(None, None, None), 2.0)
        except Exception:  # noqa: BLE001 - the connection is gone either way
            pass

    # -- sending ----------------------------------------------------------------------------------
    @property
    def max_packet(self) -> int | None:
        return self._client.max_packet if self._client is not None else None

    async def publish(self, topic: str, payload: bytes, *, qos: int = 1, retain: bool = False,
                      expiry: float | None = None, timeout: float = 10.0) -> None:
        """Publish one message; at QoS 1 returns once the broker acknowledged it. Raises
        ``BrokerDown`` when not connected (or the connection broke meanwhile) and
        ``PermissionError`` when the broker refused the topic (its ACL)."""
        client = self._client
        if client is None or not self.connected.is_set():
            raise BrokerDown(f"not connected to the broker at {self.settings.url}")
        props = None
        if expiry is not None:
            props = Properties(PacketTypes.PUBLISH)
            props.MessageExpiryInterval = max(1, int(math.ceil(expiry)))
        try:
            await client.publish(topic, payload, qos=qos, retain=retain, properties=props, timeout=timeout)
        except aiomqtt.MqttError as e:
            raise BrokerDown(f"publishing to {self.settings.url}: {e}") from None
        refused = client.refused.pop(topic, None)
        if refused is not None:
            self.counts["refused"] += 1
            raise PermissionError(f"the broker at {self.settings.url} refused a publish to {topic} ({refused}) "
                                  f"for user {self.settings.username!r}: its ACL must let this node write "
                                  f"under its own id (docs/private-cluster.md)")
        self.counts["sent"] += 1

    async def close(self) -> None:
        self._closing = True
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
            self._task = None
        if self._client is not None:
            await self._disconnect(self._client)
            self._client = None
        self.connected.clear()

    def info(self) -> dict:
        if self._client is not None and self._client.dropped:
            self.counts["incoming_dropped"] += self._client.dropped
            self._client.dropped = 0
        return {"broker": self.settings.url, "connected": self.connected.is_set(), "reconnects": self.reconnects,
                **({"incoming_dropped": self.counts["incoming_dropped"]} if self.counts["incoming_dropped"] else {}),
                **({"broker_error": self.last_error} if self.last_error and not self.connected.is_set() else {})}


class _AclRefused(Exception):
    pass
