"""This node's py-libp2p host: its identity, gossipsub and streams, run in the trio thread
(node/transport/libp2p/trio_bridge.py) and used from asyncio; it finds its peers through
node/transport/libp2p/peer_exchange.py.

- **Identity.** The host's key is the node's own Ed25519 key (one key file), so its libp2p peer
  id (``12D3KooW...``) and its swarm peer id (``sn1...``, protocol/identity.py) are two spellings
  of one public key: ``publisher_of`` turns the first into the second. Pubsub runs with strict
  signing, so every gossip message carries its origin's key and signature, checked before any
  validator sees it: the publisher of a message is authenticated, not claimed.
- **Gossipsub** with a validator per topic that runs before a message is forwarded: what it
  refuses is neither delivered nor passed on. A cheap ``precheck`` (budgets) runs first on the
  trio thread, the costly check after it in a worker thread, so a flood is refused before it
  holds one of pubsub's 10 validation slots. Message ids are the sha256 of origin and data: the
  same body from its origin is one message however many peers forward it, and a copy re-wrapped
  under another key is another message (pubsub caches verdicts by id for minutes: a refused
  re-wrap must not block the honest original).
- **Copies** of a message (the same body from its origin, via several mesh peers) are checked
  once: pubsub marks a message seen only when its check ends, so copies arriving meanwhile are
  dropped, and deliveries are deduplicated by id. A message names one topic, or is dropped.
- **Deliveries** cross to the asyncio loop at most ``MAX_PENDING`` at a time; past that (a loop
  that stalls) they are dropped and counted, never queued without bound.
- **Streams** (``open_stream`` / ``set_stream_handler``) come out as ``BridgedStream``: asyncio
  ``read``/``readexactly``/``write``/``drain``/``close`` over a libp2p stream (whose end is
  ``StreamEOF``, turned into ``b""`` here as asyncio does).
- **Discovery** (node/transport/libp2p/peer_exchange.py): the bootstrap addresses, then peer
  exchange. ``addrs`` (what pointers and peer exchange name; ``dialable_addrs`` in
  node/transport/addresses.py) are the ``announce`` addresses if given, else the listen
  addresses, a wildcard (0.0.0.0) replaced by loopback only when nothing else is known.

py-libp2p and hivemind cannot be imported in one process (both register the protobuf symbol
``crypto.pb.KeyType``): this module is imported only when the libp2p transport is selected.
"""

from __future__ import annotations

import asyncio
import collections
import hashlib
import logging
import threading
from typing import Awaitable, Callable

import multiaddr
import trio
from cryptography.hazmat.primitives import serialization
from libp2p import new_host
from libp2p.crypto.ed25519 import create_new_key_pair
from libp2p.crypto.keys import KeyType
from libp2p.custom_types import TProtocol
from libp2p.network.stream.exceptions import StreamEOF, StreamError
from libp2p.peer.id import ID
from libp2p.peer.peerinfo import info_from_p2p_addr
from libp2p.pubsub.gossipsub import PROTOCOL_ID_V11, GossipSub
from libp2p.pubsub.pubsub import Pubsub
from libp2p.tools.anyio_service import background_trio_service

from swarm_node.node.transport.addresses import dialable_addrs
from swarm_node.node.transport.base import TransportError
from swarm_node.node.transport.libp2p.peer_exchange import PX_PROTOCOL, PeerExchange
from swarm_node.node.transport.libp2p.trio_bridge import BridgeClosed, TrioThread
from swarm_node.protocol.identity import Identity, peer_id_from_public_key

log = logging.getLogger(__name__)

__all__ = ["Libp2pHost", "BridgedStream", "libp2p_key_pair", "libp2p_peer_id", "publisher_of", "GOSSIP_MAX"]

GOSSIP_MAX = 1024 * 1024  # gossipsub's inbound RPC limit (py-libp2p's default, as go/js-libp2p's)
READ_CHUNK = 1 << 20
MAX_PENDING = 512  # validated messages on their way to the asyncio loop
RECENT_IDS = 4096  # ids of delivered messages remembered, to drop copies checked side by side
SEEN_TTL_S = 120  # pubsub's seen cache (its default), and how long it keeps a verdict


def libp2p_key_pair(identity: Identity):
    """The node's Ed25519 key as a py-libp2p key pair."""
    seed = identity.private_key.private_bytes(serialization.Encoding.Raw, serialization.PrivateFormat.Raw,
                                              serialization.NoEncryption())
    return create_new_key_pair(seed)


def libp2p_peer_id(identity: Identity) -> str:
    """The libp2p peer id of the node's key (what ends a multiaddr: ``/p2p/12D3KooW...``)."""
    return ID.from_pubkey(libp2p_key_pair(identity).public_key).to_base58()


def publisher_of(peer: ID | bytes) -> str | None:
    """The swarm peer id (``sn1...``) of a libp2p peer id, or None if it is not an Ed25519 key."""
    try:
        pid = peer if isinstance(peer, ID) else ID(peer)
        key = pid.extract_public_key()
    except Exception:  # noqa: BLE001 - hostile bytes
        return None
    if key is None or key.get_type() != KeyType.Ed25519:
        return None
    raw = key.to_bytes()
    return peer_id_from_public_key(raw) if len(raw) == 32 else None


class BridgedStream:
    """A libp2p stream as the asyncio side sees it (the calls cross into the trio thread)."""

    def __init__(self, bridge: TrioThread, stream, remote: str):
        self._bridge, self._stream, self.remote = bridge, stream, remote  # remote: libp2p peer id
        self._pending = bytearray()
        self._buffer = bytearray()
        self._eof = False

    async def _read(self, n: int) -> bytes:
        try:
            return await self._stream.read(n)
        except StreamEOF:
            return b""
        except (StreamError, trio.BrokenResourceError, trio.ClosedResourceError) as e:
            raise ConnectionResetError(f"stream from {self.remote}: {e}") from None

    async def read(self, n: int = READ_CHUNK) -> bytes:
        if self._buffer:
            out = bytes(self._buffer[:n])
            del self._buffer[:n]
            return out
        if self._eof:
            return b""
        data = await self._bridge.call(self._read, n)
        if not data:
            self._eof = True
        elif len(data) > n:  # a stream may hand over more than asked
            self._buffer += data[n:]
            data = data[:n]
        return data

    async def readexactly(self, n: int) -> bytes:
        out = bytearray()
        while len(out) < n:
            piece = await self.read(n - len(out))
            if not piece:
                raise asyncio.IncompleteReadError(bytes(out), n)
            out += piece
        return bytes(out)

    def write(self, data) -> None:
        self._pending += data

    async def _write(self, data: bytes) -> None:
        try:
            await self._stream.write(data)
        except (StreamError, trio.BrokenResourceError, trio.ClosedResourceError) as e:
            raise ConnectionResetError(f"stream to {self.remote}: {e}") from None

    async def drain(self) -> None:
        if self._pending:
            data = bytes(self._pending)
            self._pending.clear()
            await self._bridge.call(self._write, data)

    async def _close(self) -> None:
        try:
            await self._stream.close()
        except Exception:  # noqa: BLE001 - a reset stream is closed already
            pass

    def close(self) -> None:
        try:
            self._bridge.spawn(self._close)
        except BridgeClosed:
            pass


# validator(publisher, data) -> bool, run in a worker thread; precheck(publisher, data) -> bool on
# the trio thread, before it (microseconds: budgets); handler(publisher, data) on the loop
Validator = Callable[[str, bytes], bool]
MessageHandler = Callable[[str, bytes], None]
StreamHandler = Callable[[BridgedStream], Awaitable[None]]


class Libp2pHost:
    def __init__(self, identity: Identity, listen: list[str], bootstrap: list[str], *,
                 announce: list[str] | None = None, target_peers: int = 8, px_interval: float = 10.0, heartbeat_interval: float = 1.0,
                 max_msgs_per_second: float = 100.0, name: str = "libp2p"):
        self.identity = identity
        self.listen, self.bootstrap, self.announce = list(listen), list(bootstrap), list(announce or [])
        self.target_peers, self.px_interval = target_peers, px_interval
        self.heartbeat_interval, self.max_msgs_per_second = heartbeat_interval, max_msgs_per_second
        self.bridge = TrioThread(name)
        self.peer_id = libp2p_peer_id(identity)
        self.host = self.pubsub = None
        self.px: PeerExchange | None = None  # once the host runs
        self.addrs: list[str] = []
        self.refused = 0  # gossip whose origin is not an Ed25519 key (no swarm identity): dropped unchecked
        self.dropped = 0  # validated messages dropped because the loop had MAX_PENDING still to take
        self.duplicates = 0  # copies dropped while their first copy was being checked, or delivered twice
        self._validating: set[bytes] = set()  # ids of messages being checked (the trio thread's)
        self._pending = threading.BoundedSemaphore(MAX_PENDING)

    # -- lifecycle --------------------------------------------------------------------------------
    async def start(self, timeout: float = 30.0) -> None:
        await self.bridge.start()
        try:
            await asyncio.wait_for(self.bridge.call(self._start_host), timeout)
        except (asyncio.TimeoutError, OSError, BridgeClosed) as e:
            await self.bridge.stop()
            raise TransportError(f"the libp2p host did not start listening on {self.listen} within {timeout:g} s: "
                                 f"{type(e).__name__}: {e}") from None
        self.bridge.spawn(self.px.run)

    async def _start_host(self) -> None:
        maddrs = [multiaddr.Multiaddr(a) for a in self.listen]
        self.host = new_host(key_pair=libp2p_key_pair(self.identity))
        # heartbeat_interval: py-libp2p's default (120 s) leaves a new node without a mesh for two
        # minutes. Eclipse protection wants 3 IPs in a mesh: a private cluster behind one NAT, or
        # loopback, has one. max_msgs: a forwarder relays every publisher's bodies and heartbeats
        # (2 a round each); 10/s would drop an honest relay's traffic past ~25 nodes.
        gossip = GossipSub(protocols=[PROTOCOL_ID_V11], degree=6, degree_low=4, degree_high=12,
                           heartbeat_interval=self.heartbeat_interval, eclipse_protection_enabled=False,
                           max_messages_per_topic_per_second=self.max_msgs_per_second)
        # validation_cache_ttl = seen_ttl: a verdict outliving the seen cache would pass a replay
        # unchecked (or keep refusing a message whose refusal was only transient).
        self.pubsub = Pubsub(self.host, gossip, msg_id_constructor=_content_id, strict_signing=True,
                             seen_ttl=SEEN_TTL_S, validation_cache_ttl=SEEN_TTL_S)

        async def run(task_status=trio.TASK_STATUS_IGNORED) -> None:
            async with self.host.run(maddrs), background_trio_service(self.pubsub), background_trio_service(gossip):
                await self.pubsub.wait_until_ready()
                task_status.started()
                await trio.sleep_forever()

        await self.bridge.nursery.start(run)  # a listen error is raised here, to start()
        self.px = PeerExchange(self.host, self.peer_id, self.bootstrap, self.target_peers, self.px_interval)
        self.host.set_stream_handler(PX_PROTOCOL, self.px.serve)
        self.addrs = dialable_addrs([str(a) for a in self.host.get_addrs()], self.announce, self.peer_id)

    async def close(self, timeout: float = 3.0) -> None:
        # Close the connections before the trio thread stops: cancelling the host's services alone
        # leaves their sockets open, and peers then see an established connection that never
        # answers again (every request to it waited for its 10-20 s timeout, measured).
        async def shut() -> None:
            with trio.move_on_after(timeout):
                await self.host.close()

        try:
            if self.host is not None and self.bridge.alive():
                await self.bridge.call(shut)
        except Exception as e:  # noqa: BLE001 - closing anyway: the thread stops below
            log.debug("closing the libp2p host: %s", e)
        finally:  # also when cancelled while closing: the thread holds the sockets
            await self.bridge.stop()

    def alive(self) -> bool:
        return self.bridge.alive()

    # -- discovery (trio side: node/transport/libp2p/peer_exchange.py) ----------------------------
    async def connect_bootstrap(self) -> int:
        """(trio side) dial every bootstrap address; returns how many answered."""
        return await self.px.connect_bootstrap()

    async def connect(self, addrs: list[str]) -> int:
        """(trio side) dial each of ``addrs``; returns how many answered."""
        return await self.px.connect(addrs)

    def connected(self) -> list[ID]:
        """(trio side: the table is the trio thread's) the peers this host has a connection to."""
        return list(self.host.get_connected_peers()) if self.host is not None else []

    async def is_connected(self, peer: str) -> bool:
        """(asyncio side) whether this host has a connection to libp2p ``peer`` (base58), read on
        the trio thread, which changes that table while it runs."""

        async def read() -> bool:
            return any(p.to_base58() == peer for p in self.connected())

        return await self.bridge.call(read)

    # -- pubsub (asyncio side) --------------------------------------------------------------------
    async def subscribe(self, topic: str, handler: MessageHandler, validator: Validator,
                        precheck: Validator | None = None, settle: Callable | None = None) -> None:
        """Messages on ``topic`` that ``precheck`` (if given; on the trio thread) and then
        ``validator`` (in a worker thread) pass reach ``handler`` on the asyncio loop; the rest are
        dropped before this node forwards them. ``settle(publisher, data, ok)`` (on the trio
        thread) hears the validator's verdict on each message the precheck passed."""

        async def validate(forwarder: ID, msg) -> bool:
            # One topic a message: pubsub runs every topic's validator on a message at once, and a
            # verdict passed for one topic must not carry it into another.
            if list(msg.topicIDs) != [topic]:
                return False
            # pubsub marks a message seen only once its check is done: copies from other mesh peers
            # that arrive meanwhile would each be checked (and charged to the budget) and delivered.
            # They are dropped at once (not held: each would hold one of pubsub's 10 validation
            # slots); the first copy's verdict then replaces theirs in pubsub's cache and marks it
            # seen. Peer scores weigh nothing here (py-libp2p's defaults), so a forwarder loses none.
            mid = _content_id(msg)
            if mid in self._validating:
                self.duplicates += 1
                return False
            self._validating.add(mid)
            try:
                return await check(msg)
            finally:
                self._validating.discard(mid)

        async def check(msg) -> bool:
            publisher = publisher_of(msg.from_id)
            if publisher is None:
                self.bridge.to_loop(self._count_refused)
                return False
            if publisher == self.identity.peer_id:
                return True  # our own publish: checked when made
            data = bytes(msg.data)
            try:
                if precheck is not None and not precheck(publisher, data):
                    return False
            except Exception:  # noqa: BLE001 - as below
                log.exception("gossip precheck failed on a message from %s; dropped", publisher)
                return False
            try:
                ok = await trio.to_thread.run_sync(validator, publisher, data)
            except Exception:  # noqa: BLE001 - a bug in a check must not let the message through
                log.exception("gossip validator failed on a message from %s; dropped", publisher)
                ok = False
            if settle is not None:
                settle(publisher, data, bool(ok))
            return bool(ok)

        async def subscribe() -> None:
            self.pubsub.set_topic_validator(topic, validate, True)
            sub = await self.pubsub.subscribe(topic)
            self.bridge.nursery.start_soon(read, sub)

        async def read(sub) -> None:
            recent: collections.OrderedDict = collections.OrderedDict()  # ids delivered lately
            while True:
                msg = await sub.get()
                publisher = publisher_of(msg.from_id)
                if publisher is None or publisher == self.identity.peer_id:  # gossip echoes our own
                    continue
                mid = _content_id(msg)
                if mid in recent:
                    self.duplicates += 1
                    continue
                recent[mid] = None
                if len(recent) > RECENT_IDS:
                    recent.popitem(last=False)
                if not self._pending.acquire(blocking=False):
                    self.dropped += 1
                    continue
                self.bridge.to_loop(self._deliver, handler, publisher, bytes(msg.data))

        await self.bridge.call(subscribe)

    def _deliver(self, handler: MessageHandler, publisher: str, data: bytes) -> None:
        self._pending.release()
        handler(publisher, data)

    def _count_refused(self) -> None:
        self.refused += 1

    async def publish(self, topic: str, data: bytes) -> None:
        if len(data) > GOSSIP_MAX - 4096:
            raise ValueError(f"a gossip message of {len(data)} bytes is over the {GOSSIP_MAX - 4096}-byte limit")
        await self.bridge.call(self.pubsub.publish, topic, data)

    def mesh_peers(self, topic: str) -> int:
        router = self.pubsub.router if self.pubsub is not None else None
        return len(getattr(router, "mesh", {}).get(topic, ())) if router is not None else 0

    def topics_of_peers(self) -> set[str]:
        """The gossip topics the connected peers subscribe to (each says so on connecting), ours or
        not: read from the trio thread's map, so a copy taken while it changes is skipped."""
        try:
            return {t for t, peers in list(getattr(self.pubsub, "peer_topics", {}).items()) if peers}
        except RuntimeError:  # changed size while copied
            return set()

    # -- streams (asyncio side) -------------------------------------------------------------------
    async def set_stream_handler(self, protocol: str, handler: StreamHandler) -> None:
        """Streams opened to this host on ``protocol`` are served by ``handler`` on the asyncio loop."""

        async def serve(stream) -> None:
            remote = stream.muxed_conn.peer_id.to_base58()
            try:
                await self.bridge.await_loop(handler, BridgedStream(self.bridge, stream, remote))
            except Exception as e:  # noqa: BLE001 - the handler logs what matters
                log.debug("stream handler for %s failed: %s", protocol, e)
            finally:
                try:
                    await stream.close()
                except Exception:  # noqa: BLE001
                    pass

        async def register() -> None:
            self.host.set_stream_handler(TProtocol(protocol), serve)

        await self.bridge.call(register)

    async def open_stream(self, address: str, protocol: str, timeout: float) -> BridgedStream:
        """A stream to the peer at ``address`` (a full multiaddr ending in /p2p/<id>, or a bare
        libp2p peer id this host can already reach)."""

        async def open_() -> BridgedStream:
            if "/" in address:
                info = info_from_p2p_addr(multiaddr.Multiaddr(address))
                if info.peer_id not in self.host.get_connected_peers():
                    self.host.get_peerstore().add_addrs(info.peer_id, info.addrs, 600)
                peer = info.peer_id
            else:
                peer = ID.from_base58(address)
            with trio.fail_after(timeout):
                stream = await self.host.new_stream(peer, [TProtocol(protocol)])
            return BridgedStream(self.bridge, stream, peer.to_base58())

        try:
            return await self.bridge.call(open_)
        except (trio.TooSlowError, BridgeClosed) as e:
            raise ConnectionError(f"could not open a stream to {address}: {type(e).__name__}") from None
        except Exception as e:  # noqa: BLE001 - libp2p raises a zoo: dial, negotiation, bad address
            raise ConnectionError(f"could not open a stream to {address}: {type(e).__name__}: {e}") from None

    def info(self) -> dict:
        return {"peer_id_libp2p": self.peer_id, "addrs": self.addrs, "connected": len(self.connected()),
                "not_ed25519": self.refused, "deliveries_dropped": self.dropped, "duplicates": self.duplicates,
                "undialable": getattr(getattr(self, "px", None), "undialable", 0)}  # NAT: docs/nat.md


def _content_id(msg) -> bytes:
    return hashlib.sha256(len(msg.from_id).to_bytes(2, "big") + msg.from_id + msg.data).digest()
