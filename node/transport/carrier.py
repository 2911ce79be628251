"""What the broadcast needs from a transport: one request, one reply, between two peers.

The broadcast (manifests, chunks, topology) knows nothing of hivemind, libp2p or MQTT; a carrier
only moves bytes. A request is small bytes; the reply is a status byte and a payload the server
writes in slices through the node's upload cap. Framing on a stream::

    request  u32 length | request bytes            (<= MAX_REQUEST)
    reply    u8 status  | u64 length | payload     (the caller says the most it will read)

``MemoryCarrier`` joins carriers of one process through a hub (unit tests and simulation);
``node/transport/hivemind/carrier.py`` runs the same framing over hivemind's p2p streams, beside
the rollout bodies. A carrier that closes aborts the replies it is writing, as a killed process
would.
"""

from __future__ import annotations

import asyncio
import logging
import struct
from abc import ABC, abstractmethod
from typing import Awaitable, Callable

from swarm_node.node.transport.ratelimit import TokenBucket
from swarm_node.protocol.manifest import MAX_MANIFEST_BYTES

log = logging.getLogger(__name__)

__all__ = ["Carrier", "CarrierError", "Handler", "unpack_reply", "StreamCarrier", "MemoryCarrier", "MemoryHub",
           "MAX_REQUEST", "SLICE", "reply_deadline"]

MAX_REQUEST = MAX_MANIFEST_BYTES + 1024  # a manifest offer is the biggest request
SLICE = 64 * 1024  # bytes written per upload-cap token take
U32 = struct.Struct(">I")
HEADER = struct.Struct(">BQ")
STREAMS_PER_REMOTE = 16  # requests one peer may have open with us (an honest one: a window + offers)
MAX_STREAMS = 256  # ... and all peers together (peer ids are free: the per-peer bound alone is not one)
READ_TIMEOUT_S = 30.0  # a peer that reads or writes nothing for this long is dropped
REQUEST_TIMEOUT_S = 5.0  # a request is small: its header must come this fast ...
REQUEST_RATE = 1_000_000  # ... and its body (a manifest offer, up to 2 MiB) at least this fast
LINGER_S = 5.0  # after a reply, how long to wait for the requester to close its end
MIN_RATE = 64 * 1024  # bytes/s: a reply slower than this is given up (a 256 KiB chunk: 4 s + the timeout)

# handler(remote carrier id, request) -> (status, payload) or (status, payload, done[, low]):
# ``done(written)`` is called once the reply is written (or failed), so a handler's serve slot
# covers the upload too; ``written``: the payload's bytes that went out (all of them, or fewer when
# the requester reset the stream or stalled: what it cost us); ``low``: the upload yields to
# normal ones (TokenBucket.take).
Handler = Callable[[str, bytes], Awaitable[tuple]]


def unpack_reply(result: tuple) -> tuple[int, bytes | memoryview, Callable[[], None], bool]:
    if len(result) == 4:
        return result
    if len(result) == 3:
        return (*result, False)
    return result[0], result[1], lambda written: None, False


def reply_deadline(size: int) -> float:
    """Seconds a ``size``-byte reply may take in all, on either side: the timeout, plus the bytes
    at ``MIN_RATE``."""
    return READ_TIMEOUT_S + size / MIN_RATE


class CarrierError(ConnectionError):
    """The peer could not be reached, vanished mid-reply, or replied out of bounds."""


class Carrier(ABC):
    """Moves one request and its reply between this peer and another; paces what it uploads."""

    address: str = ""  # how others reach this peer (set by start)

    def __init__(self, upload: TokenBucket | None = None):
        self.upload = upload
        self._reply_order: dict[str, tuple[asyncio.Lock, int]] = {}  # remote -> (lock, replies queued)
        self._open: dict[str, int] = {}  # remote -> requests being served
        self.refused_streams = 0
        # remote -> whether the topology ties it to us (a child or a node above): set by the
        # broadcast peer; those are served past MAX_STREAMS, so strangers cannot crowd them out
        self.favoured: Callable[[str], bool] = lambda remote: False

    def admit(self, remote: str) -> bool:
        """Whether to serve one more request from ``remote`` (pair with ``leave``): a peer that
        opens requests by the hundred is refused past its share instead of queueing them all."""
        if self._open.get(remote, 0) >= STREAMS_PER_REMOTE or (
                sum(self._open.values()) >= MAX_STREAMS and not self.favoured(remote)):
            self.refused_streams += 1
            return False
        self._open[remote] = self._open.get(remote, 0) + 1
        return True

    def leave(self, remote: str) -> None:
        n = self._open.pop(remote, 1) - 1
        if n > 0:
            self._open[remote] = n

    @abstractmethod
    async def start(self, handler: Handler) -> None: ...

    @abstractmethod
    async def call(self, address: str, request: bytes, *, max_reply: int, timeout: float) -> tuple[int, bytes]:
        """Send ``request`` and read the reply. ``timeout`` bounds the wait for the reply to start
        and for each slice of it (progress, not the whole: a capped upload may take long).
        Raises ``CarrierError``."""

    @abstractmethod
    async def close(self) -> None: ...

    def remote_id(self, address: str) -> str:
        """The id a handler sees for requests from the peer at ``address``."""
        return address

    async def paced(self, payload: bytes | memoryview, write: Callable[[memoryview], Awaitable[None]],
                    remote: str = "", low: bool = False) -> None:
        """Write ``payload`` through the upload cap. Replies to one peer go out one at a time, in
        the order they were asked: interleaved, a window of chunk requests would finish together,
        each ``window`` times later, and a relay forwards a chunk only once it has all of it."""
        lock, users = self._reply_order.get(remote, (asyncio.Lock(), 0))
        self._reply_order[remote] = (lock, users + 1)
        try:
            async with lock:
                view = memoryview(payload)
                for i in range(0, len(view), SLICE):
                    piece = view[i:i + SLICE]
                    if self.upload is not None:
                        await self.upload.take(len(piece), low=low)
                    await write(piece)
        finally:
            lock, users = self._reply_order[remote]
            if users == 1:
                del self._reply_order[remote]
            else:
                self._reply_order[remote] = (lock, users - 1)


class StreamCarrier(Carrier):
    """The framing above on a byte stream with asyncio's reader/writer calls (``readexactly``,
    ``read``, ``write``, ``drain``, ``close``): hivemind's p2p streams and py-libp2p's (through the
    trio bridge) share it. A subclass opens streams and registers the handler."""

    def __init__(self, upload: TokenBucket | None = None):
        super().__init__(upload)
        self._handler: Handler | None = None
        self._serving: set[asyncio.Task] = set()

    async def serve_stream(self, remote: str, reader, writer) -> None:
        """Serve one request from ``remote`` (an id the carrier authenticated) on this stream."""
        if not self.admit(remote):
            writer.close()  # past its share of open requests: closing is the answer
            return
        task = asyncio.current_task()
        self._serving.add(task)
        admitted = True
        try:
            (n,) = U32.unpack(await asyncio.wait_for(reader.readexactly(U32.size), REQUEST_TIMEOUT_S))
            if n > MAX_REQUEST:
                return  # closing is the answer to a request nobody honest sends
            # A stream slot is held while the request arrives: a trickling peer gives it back soon.
            request = await asyncio.wait_for(reader.readexactly(n), REQUEST_TIMEOUT_S + n / REQUEST_RATE)
            status, payload, done, low = unpack_reply(await self._handler(remote, request))
            sent = 0
            try:
                writer.write(HEADER.pack(status, len(payload)))

                async def write(piece: memoryview) -> None:
                    nonlocal sent
                    writer.write(piece)
                    sent += len(piece)  # handed over: it may reach the requester even if the drain fails
                    await asyncio.wait_for(writer.drain(), READ_TIMEOUT_S)

                # A deadline on the whole reply, as the requester has (``call_on``): with only the
                # one per piece, a requester reading a slice every 29 s held its serve (and a large
                # body's reservation, node/transport/libp2p/serving.py) for as long as it liked.
                await asyncio.wait_for(self.paced(payload, write, remote, low), reply_deadline(len(payload)))
            finally:
                done(sent)
            self.leave(remote)  # the slot covers the request and the reply, not the wait below
            admitted = False
            # Close only once the requester has read it all and closed its end: p2pd drops what is
            # still in flight when the server closes first (measured: the last 32-128 KiB of a
            # 256 KiB reply lost, one reply in a few hundred, under load).
            await asyncio.wait_for(reader.read(1), LINGER_S)
        except (asyncio.TimeoutError, asyncio.IncompleteReadError, ConnectionError) as e:
            log.debug("weights request from %s failed: %s", remote, e)
        except asyncio.CancelledError:  # close(): the reply is cut, as a killed node's would be
            pass
        finally:
            self._serving.discard(task)
            if admitted:
                self.leave(remote)
            writer.close()

    async def call_on(self, address: str, reader, writer, request: bytes, *, max_reply: int,
                      timeout: float) -> tuple[int, bytes]:
        """Send ``request`` on an open stream to ``address`` and read the reply (``Carrier.call``)."""
        try:
            writer.write(U32.pack(len(request)) + request)
            await asyncio.wait_for(writer.drain(), timeout)
            status, size = HEADER.unpack(await asyncio.wait_for(reader.readexactly(HEADER.size), timeout))
            if size > max_reply:
                raise CarrierError(f"{address} announced a {size}-byte reply, over {max_reply}: not read")
            body = bytearray()
            # A deadline per piece (a capped upload may be slow) and one for the whole at MIN_RATE,
            # so a peer trickling a byte a while cannot hold the request forever.
            loop = asyncio.get_running_loop()
            deadline = loop.time() + timeout + size / MIN_RATE
            while len(body) < size:
                left = deadline - loop.time()
                if left <= 0:
                    raise CarrierError(f"{address} sent {len(body)} of {size} bytes, slower than "
                                       f"{MIN_RATE / 1e3:.0f} kB/s")
                try:
                    piece = await asyncio.wait_for(reader.read(min(size - len(body), 1 << 20)), min(timeout, left))
                except asyncio.TimeoutError:
                    if loop.time() < deadline:
                        raise  # no progress for ``timeout``
                    raise CarrierError(f"{address} sent {len(body)} of {size} bytes, slower than "
                                       f"{MIN_RATE / 1e3:.0f} kB/s") from None
                if not piece:
                    raise CarrierError(f"{address} went away mid-reply ({len(body)} of {size} bytes)")
                body += piece
            return status, bytes(body)
        except CarrierError:
            raise
        except (asyncio.TimeoutError, asyncio.IncompleteReadError, ConnectionError, OSError) as e:
            raise CarrierError(f"{address} failed mid-reply: {type(e).__name__}") from e
        finally:
            writer.close()

    def cancel_serving(self) -> None:
        for t in list(self._serving):
            t.cancel()


class MemoryHub:
    def __init__(self):
        self.carriers: dict[str, MemoryCarrier] = {}


class MemoryCarrier(Carrier):
    """In-process carrier: a call runs the other peer's handler and streams its paced reply."""

    def __init__(self, hub: MemoryHub, name: str, upload: TokenBucket | None = None):
        super().__init__(upload)
        self.hub, self.address = hub, name
        self._handler: Handler | None = None
        self._serving: set[asyncio.Task] = set()

    async def start(self, handler: Handler) -> None:
        self._handler = handler
        self.hub.carriers[self.address] = self

    async def call(self, address: str, request: bytes, *, max_reply: int, timeout: float) -> tuple[int, bytes]:
        server = self.hub.carriers.get(address)
        if server is None or server._handler is None:
            raise CarrierError(f"{address} is not reachable")
        task = asyncio.ensure_future(server._serve(self.address, request, max_reply))
        server._serving.add(task)
        task.add_done_callback(server._serving.discard)
        try:
            done, _ = await asyncio.wait({task}, timeout=timeout)
        except asyncio.CancelledError:
            task.cancel()
            raise
        if not done:
            task.cancel()
            raise CarrierError(f"{address} did not answer within {timeout:g} s")
        if task.cancelled():
            raise CarrierError(f"{address} went away mid-reply")
        if task.exception() is not None:
            e = task.exception()
            raise e if isinstance(e, CarrierError) else CarrierError(f"{address} failed: {e!r}") from e
        return task.result()

    async def _serve(self, remote: str, request: bytes, max_reply: int) -> tuple[int, bytes]:
        if not self.admit(remote):
            raise CarrierError(f"{self.address} refused a request from {remote}: too many open")
        try:
            return await self._serve_admitted(remote, request, max_reply)
        finally:
            self.leave(remote)

    async def _serve_admitted(self, remote: str, request: bytes, max_reply: int) -> tuple[int, bytes]:
        status, payload, done, low = unpack_reply(await self._handler(remote, request))
        parts: list[bytes] = []
        try:
            if len(payload) > max_reply:
                raise CarrierError(f"{self.address} replied {len(payload)} bytes, over {max_reply}")

            async def write(piece: memoryview) -> None:
                parts.append(bytes(piece))
                await asyncio.sleep(0)

            await self.paced(payload, write, remote, low)
            return status, b"".join(parts)
        finally:
            done(sum(map(len, parts)))

    async def close(self) -> None:
        if self.hub.carriers.get(self.address) is self:
            del self.hub.carriers[self.address]
        for t in list(self._serving):
            t.cancel()
