"""The broadcast's carrier through an MQTT broker: a request and its reply as messages to inboxes.

Every node reads its own inbox, ``swarm-node/<swarm>/to/<its peer id>/#``, on the connection its
MQTT transport already holds (node/transport/mqtt/transport.py ``add_route``)::

    request  to/<server>/<requester>/<nonce>   "Q" | part (node/transport/mqtt/parts.py) of the request
                                                                                 (<= MAX_REQUEST: a manifest offer
                                                                                 can be larger than the broker's limit)
    reply    to/<requester>/<server>/<nonce>   "R" | u32 seq | piece            seq 0 is the header,
                                                                                 u8 status | u64 length

The nonce is 64 random bits per call. A reply is written in pieces under the broker's packet
limit, through the node's upload cap (``Carrier.paced``), and read in order (QoS 1 on one topic
from one client keeps it; a piece out of its place ends the call). An address is a peer id, and
the remote id a handler sees is the ``<requester>`` of the topic: a claim, unless the broker's ACL
(``pattern write swarm-node/+/to/+/%u/#``, docs/private-cluster.md) binds it to the login, as it
should. Nothing a reply carries is trusted either way: manifests are signed and chunks hashed
(node/broadcast/peer.py), so a forged piece costs a retry, never a wrong weight.

With a broker, every byte goes up to it and down again: the broker does the fan-out, and what the
relay tree still buys is that no node uploads more than a copy or two (docs/broadcast.md).
"""

from __future__ import annotations

import asyncio
import logging
import os
import struct

from swarm_node.node.transport.ratelimit import TokenBucket
from swarm_node.node.transport.carrier import HEADER, MAX_REQUEST, Carrier, CarrierError, Handler, unpack_reply
from swarm_node.node.transport.mqtt.link import BrokerDown
from swarm_node.node.transport.mqtt.parts import PartError, Reassembler, parse_part, split
from swarm_node.protocol.identity import PEER_ID_RE

log = logging.getLogger(__name__)

__all__ = ["MqttCarrier"]

_SEQ = struct.Struct(">I")
MAX_PENDING_CALLS = 256  # replies this node waits for at once (a window of chunk requests and offers)
PARTIAL_REQUESTS_BYTES = 16 * 1024 * 1024  # requests in several parts being put together, all senders
PARTIAL_REQUEST_AGE_S = 30.0


class _Call:
    def __init__(self, max_reply: int):
        self.max_reply = max_reply
        self.pieces: asyncio.Queue = asyncio.Queue()
        self.queued = 0  # bytes put in ``pieces``: more than the reply may hold are not kept


class MqttCarrier(Carrier):
    def __init__(self, transport, upload: TokenBucket | None = None):
        super().__init__(upload)
        self.transport = transport
        self.address = transport.publisher
        self._prefix = f"swarm-node/{transport.swarm}/to"
        self._handler: Handler | None = None
        self._calls: dict[tuple[str, str], _Call] = {}  # (server, nonce) -> the call waiting for it
        self._serving: set[asyncio.Task] = set()
        self.dropped = 0  # inbox messages that matched nothing (late pieces, strangers' noise)
        # Single-part requests (chunk asks) never touch this budget; only large offers do.
        self._requests = Reassembler(PARTIAL_REQUESTS_BYTES, PARTIAL_REQUEST_AGE_S)

    async def start(self, handler: Handler) -> None:
        self._handler = handler
        await self.transport.add_route("to", f"{self._prefix}/{self.address}/#", self._on_inbox)

    def _piece_size(self) -> int:
        return self.transport.part_size_now() - _SEQ.size - 1

    # -- the inbox --------------------------------------------------------------------------------
    def _on_inbox(self, parts: list[str], payload: bytes) -> None:
        # parts: swarm-node / <swarm> / to / <me> / <sender> / <nonce>
        if len(parts) != 6 or parts[3] != self.address or not PEER_ID_RE.fullmatch(parts[4]) or not payload:
            self.dropped += 1
            return
        sender, nonce = parts[4], parts[5]
        if payload[:1] == b"Q":
            if len(nonce) > 32:
                self.dropped += 1
                return
            try:
                request = self._requests.add((sender, nonce), parse_part(payload[1:]), MAX_REQUEST, owner=sender)
            except PartError:
                self.dropped += 1
                return
            if request is not None:
                self._on_request(sender, nonce, request)
        elif payload[:1] == b"R" and len(payload) >= 1 + _SEQ.size:
            call = self._calls.get((sender, nonce))
            if call is None:
                self.dropped += 1
                return
            (seq,) = _SEQ.unpack_from(payload, 1)
            call.queued += len(payload)
            if call.queued > call.max_reply + HEADER.size + 64 * 1024:
                self.dropped += 1  # a flood into this call: the reader ends it on the gap
                return
            call.pieces.put_nowait((seq, payload[1 + _SEQ.size:]))
        else:
            self.dropped += 1

    def _on_request(self, sender: str, nonce: str, request: bytes) -> None:
        if self._handler is None:
            self.dropped += 1
            return
        if not self.admit(sender):
            return  # past its share of open requests: no answer is the answer (it times out)
        task = asyncio.ensure_future(self._serve(sender, nonce, request))
        self._serving.add(task)
        task.add_done_callback(self._serving.discard)

    async def _serve(self, sender: str, nonce: str, request: bytes) -> None:
        topic = f"{self._prefix}/{sender}/{self.address}/{nonce}"
        seq = 0

        async def send(piece: bytes) -> None:
            nonlocal seq
            await self.transport.link.publish(topic, b"R" + _SEQ.pack(seq) + piece, qos=1)
            seq += 1

        try:
            status, payload, done, low = unpack_reply(await self._handler(sender, request))
            sent = 0
            try:
                await send(HEADER.pack(status, len(payload)))  # piece 0: the header alone
                size = self._piece_size()

                async def write(piece: memoryview) -> None:
                    nonlocal sent
                    for i in range(0, len(piece), size):
                        await send(bytes(piece[i:i + size]))
                        sent += len(piece[i:i + size])

                await self.paced(payload, write, sender, low)
            finally:
                done(sent)
        except (BrokerDown, PermissionError) as e:
            log.debug("weights reply to %s failed: %s", sender, e)
        except asyncio.CancelledError:  # close(): the reply is cut, as a killed node's would be
            pass
        finally:
            self.leave(sender)

    # -- calling ----------------------------------------------------------------------------------
    async def call(self, address: str, request: bytes, *, max_reply: int, timeout: float) -> tuple[int, bytes]:
        if not PEER_ID_RE.fullmatch(address):
            raise CarrierError(f"{address!r} is not a peer id (an MQTT carrier's address)")
        if len(self._calls) >= MAX_PENDING_CALLS:
            raise CarrierError(f"{len(self._calls)} calls already waiting for replies")
        nonce = os.urandom(8).hex()
        call = self._calls[(address, nonce)] = _Call(max_reply)
        try:
            try:
                for part in split(request, self._piece_size()):
                    await self.transport.link.publish(f"{self._prefix}/{address}/{self.address}/{nonce}", b"Q" + part,
                                                      qos=1, timeout=timeout)
            except (BrokerDown, PermissionError) as e:
                raise CarrierError(f"could not ask {address}: {e}") from e
            body, size, status, expect = bytearray(), None, 0, 0
            while size is None or len(body) < size:
                try:
                    seq, piece = await asyncio.wait_for(call.pieces.get(), timeout)
                except asyncio.TimeoutError:
                    got = "no reply" if size is None else f"{len(body)} of {size} bytes"
                    raise CarrierError(f"{address}: {got} within {timeout:g} s") from None
                if seq < expect:
                    continue  # a duplicate (QoS 1 delivers at least once)
                if seq != expect:
                    raise CarrierError(f"{address} sent piece {seq} where {expect} was due")
                expect += 1
                if size is None:
                    if len(piece) < HEADER.size:
                        raise CarrierError(f"{address} sent a reply without its header")
                    status, size = HEADER.unpack_from(piece)
                    if size > max_reply:
                        raise CarrierError(f"{address} announced a {size}-byte reply, over {max_reply}: not read")
                    piece = piece[HEADER.size:]
                body += piece
                if len(body) > size:
                    raise CarrierError(f"{address} sent more than the {size} bytes it announced")
            return status, bytes(body)
        finally:
            del self._calls[(address, nonce)]

    async def close(self) -> None:
        self._handler = None  # requests still arriving are not served
        await self.transport.remove_route("to", f"{self._prefix}/{self.address}/#")
        for t in list(self._serving):
            t.cancel()
        await asyncio.gather(*self._serving, return_exceptions=True)
