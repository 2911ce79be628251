"""The broadcast's carrier over hivemind's p2p streams (the daemon that already carries rollout bodies).

One stream per request, on the handler ``/swarm-node/<swarm>/weights``, with the framing of
node/transport/carrier.py. An address is a full multiaddr ending in ``/p2p/<libp2p peer id>``;
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

from swarm_node.node.transport.addresses import peer_id_of, relayed, with_peer
from swarm_node.node.transport.carrier import CarrierError, Handler, StreamCarrier
from swarm_node.node.transport.ratelimit import TokenBucket

log = logging.getLogger(__name__)

__all__ = ["HivemindCarrier"]

MAX_CONNECTED = 1024  # addresses remembered as dialled


def _handler_name(swarm: str) -> str:
    return f"/swarm-node/{swarm}/weights"


def _peer_of(address: str) -> tuple[PeerID, Multiaddr | None]:
    """The peer an address names and where to dial it; None for a relayed address
    (``<relay>/p2p/<relay id>/p2p-circuit/p2p/<peer id>``): p2pd fails to parse one handed to
    ``connect`` ("length greater than remaining number of bytes"), so the daemon finds the peer's
    circuit addresses itself (its DHT and identify), as it does for rollout bodies."""
    try:
        if relayed(address):
            return PeerID.from_base58(peer_id_of(address)), None
        maddr = Multiaddr(address)
        pid = maddr.value_for_protocol("p2p")
        return PeerID.from_base58(pid), maddr.decapsulate(Multiaddr(f"/p2p/{pid}"))
    except Exception as e:  # multiaddr raises a zoo of errors on bad text
        raise CarrierError(f"{address!r} is not a multiaddr ending in /p2p/<peer id>: {e}") from e


class HivemindCarrier(StreamCarrier):
    def __init__(self, p2p: P2P, swarm: str, upload: TokenBucket | None = None, owns_p2p: bool = False):
        super().__init__(upload)
        self.p2p, self.swarm, self.owns_p2p = p2p, swarm, owns_p2p
        self._connected: set[str] = set()

    @classmethod
    async def create(cls, swarm: str, upload: TokenBucket | None = None,
                     host_maddrs=("/ip4/127.0.0.1/tcp/0",)) -> "HivemindCarrier":
        p2p = await P2P.create(host_maddrs=list(host_maddrs), nat_port_map=False, auto_nat=False, use_relay=False)
        return cls(p2p, swarm, upload, owns_p2p=True)

    async def start(self, handler: Handler) -> None:
        self._handler = handler
        await self.p2p.add_binary_stream_handler(_handler_name(self.swarm), self._serve)
        maddrs = await self.p2p.get_visible_maddrs()
        self.address = with_peer(str(maddrs[0]), self.p2p.peer_id)

    def remote_id(self, address: str) -> str:
        return _peer_of(address)[0].to_base58()

    async def _serve(self, info, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await self.serve_stream(info.peer_id.to_base58(), reader, writer)

    async def call(self, address: str, request: bytes, *, max_reply: int, timeout: float) -> tuple[int, bytes]:
        peer, maddr = _peer_of(address)
        try:
            if address not in self._connected and maddr is not None:
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
            return await self.call_on(address, reader, writer, request, max_reply=max_reply, timeout=timeout)
        except CarrierError:
            # Dial the address again next time: the stream may have ridden a relayed connection
            # the daemon already had to this peer, and the relay cut it (docs/nat.md).
            self._connected.discard(address)
            raise

    async def close(self) -> None:
        self.cancel_serving()
        try:
            await self.p2p.remove_binary_stream_handler(_handler_name(self.swarm))
        except Exception as e:  # the daemon may already be gone (killed peer)
            log.debug("removing the weights handler: %s", e)
        if self.owns_p2p:
            await self.p2p.shutdown()
