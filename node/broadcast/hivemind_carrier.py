"""The broadcast's carrier over hivemind's p2p streams (the daemon that already carries rollout bodies).

One stream per request, on the handler ``/swarm-node/<swarm>/weights``, with the framing of
node/broadcast/carrier.py. An address is a full multiaddr ending in ``/p2p/<libp2p peer id>``;
the carrier dials it once and lets the daemon keep the connection. The remote id a handler sees
is the libp2p peer id the daemon authenticated (TLS/noise), so it cannot be claimed.

It can own its ``P2P`` (``HivemindCarrier.create``: benchmarks, tests) or share the node's
(``HivemindCarrier(p2p, swarm)``: the DHT node's daemon, so a node has one p2pd).
"""

from __future__ import annotations

import asyncio
import logging

from hivemind.p2p import P2P, P2PDaemonError, PeerID
from hivemind.utils.multiaddr import Multiaddr

from node.broadcast.bucket import TokenBucket
from node.broadcast.carrier import HEADER, MAX_REQUEST, U32, Carrier, CarrierError, Handler, unpack_reply

log = logging.getLogger(__name__)

__all__ = ["HivemindCarrier"]

READ_TIMEOUT_S = 30.0  # a peer that reads or writes nothing for this long is dropped
REQUEST_TIMEOUT_S = 5.0  # a request is small: its header must come this fast ...
REQUEST_RATE = 1_000_000  # ... and its body (a manifest offer, up to 2 MiB) at least this fast
MAX_CONNECTED = 1024  # addresses remembered as dialled
LINGER_S = 5.0  # after a reply, how long to wait for the requester to close its end
MIN_RATE = 64 * 1024  # bytes/s: a reply slower than this is given up (a 256 KiB chunk: 4 s + the timeout)


def _handler_name(swarm: str) -> str:
    return f"/swarm-node/{swarm}/weights"


def _peer_of(address: str) -> tuple[PeerID, Multiaddr]:
    try:
        maddr = Multiaddr(address)
        pid = maddr.value_for_protocol("p2p")
        return PeerID.from_base58(pid), maddr.decapsulate(Multiaddr(f"/p2p/{pid}"))
    except Exception as e:  # multiaddr raises a zoo of errors on bad text
        raise CarrierError(f"{address!r} is not a multiaddr ending in /p2p/<peer id>: {e}") from e


class HivemindCarrier(Carrier):
    def __init__(self, p2p: P2P, swarm: str, upload: TokenBucket | None = None, owns_p2p: bool = False):
        super().__init__(upload)
        self.p2p, self.swarm, self.owns_p2p = p2p, swarm, owns_p2p
        self._handler: Handler | None = None
        self._connected: set[str] = set()
        self._serving: set[asyncio.Task] = set()

    @classmethod
    async def create(cls, swarm: str, upload: TokenBucket | None = None,
                     host_maddrs=("/ip4/127.0.0.1/tcp/0",)) -> "HivemindCarrier":
        p2p = await P2P.create(host_maddrs=list(host_maddrs), nat_port_map=False, auto_nat=False, use_relay=False)
        return cls(p2p, swarm, upload, owns_p2p=True)

    async def start(self, handler: Handler) -> None:
        self._handler = handler
        await self.p2p.add_binary_stream_handler(_handler_name(self.swarm), self._serve)
        maddrs = await self.p2p.get_visible_maddrs()
        self.address = str(maddrs[0]) if "/p2p/" in str(maddrs[0]) else f"{maddrs[0]}/p2p/{self.p2p.peer_id}"

    def remote_id(self, address: str) -> str:
        return _peer_of(address)[0].to_base58()

    async def _serve(self, info, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        remote = info.peer_id.to_base58()
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
            try:
                writer.write(HEADER.pack(status, len(payload)))

                async def write(piece: memoryview) -> None:
                    writer.write(piece)
                    await asyncio.wait_for(writer.drain(), READ_TIMEOUT_S)

                await self.paced(payload, write, remote, low)
            finally:
                done()
            self.leave(remote)  # the slot covers the request and the reply, not the wait below
            admitted = False
            # Close only once the requester has read it all and closed its end: p2pd drops what is
            # still in flight when the server closes first (measured: the last 32-128 KiB of a
            # 256 KiB reply lost, one reply in a few hundred, under load).
            await asyncio.wait_for(reader.read(1), LINGER_S)
        except (asyncio.TimeoutError, asyncio.IncompleteReadError, ConnectionError) as e:
            log.debug("weights request from %s failed: %s", info.peer_id, e)
        except asyncio.CancelledError:  # close(): the reply is cut, as a killed node's would be
            pass
        finally:
            self._serving.discard(task)
            if admitted:
                self.leave(remote)
            writer.close()

    async def call(self, address: str, request: bytes, *, max_reply: int, timeout: float) -> tuple[int, bytes]:
        peer, maddr = _peer_of(address)
        try:
            if address not in self._connected:
                await asyncio.wait_for(self.p2p._client.connect(peer, [maddr]), timeout)  # no public dial in hivemind
                if len(self._connected) >= MAX_CONNECTED:
                    self._connected.clear()  # dialling again is cheap (the daemon keeps what it has)
                self._connected.add(address)
            _, reader, writer = await asyncio.wait_for(
                self.p2p.call_binary_stream_handler(peer, _handler_name(self.swarm)), timeout)
        except (asyncio.TimeoutError, P2PDaemonError, ConnectionError, OSError) as e:
            self._connected.discard(address)
            raise CarrierError(f"could not reach {address}: {type(e).__name__}: {e}") from e
        try:
            writer.write(U32.pack(len(request)) + request)
            await asyncio.wait_for(writer.drain(), timeout)
            status, size = HEADER.unpack(await asyncio.wait_for(reader.readexactly(HEADER.size), timeout))
            if size > max_reply:
                raise CarrierError(f"{address} announced a {size}-byte reply, over {max_reply}: not read")
            body = bytearray()
            # A deadline per piece (a capped upload may be slow) and one for the whole at MIN_RATE,
            # so a peer trickling a byte a while cannot hold the request forever.
            deadline = asyncio.get_running_loop().time() + timeout + size / MIN_RATE
            while len(body) < size:
                left = deadline - asyncio.get_running_loop().time()
                if left <= 0:
                    raise CarrierError(f"{address} sent {len(body)} of {size} bytes, slower than "
                                       f"{MIN_RATE / 1e3:.0f} kB/s")
                try:
                    piece = await asyncio.wait_for(reader.read(min(size - len(body), 1 << 20)), min(timeout, left))
                except asyncio.TimeoutError:
                    if asyncio.get_running_loop().time() < deadline:
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

    async def close(self) -> None:
        for t in list(self._serving):
            t.cancel()
        try:
            await self.p2p.remove_binary_stream_handler(_handler_name(self.swarm))
        except Exception as e:  # the daemon may already be gone (killed peer)
            log.debug("removing the weights handler: %s", e)
        if self.owns_p2p:
            await self.p2p.shutdown()
