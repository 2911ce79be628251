"""The broadcast's carrier over py-libp2p streams (the host that already carries the node's gossip).

One stream per request on ``/swarm-node/<swarm>/weights/1.0.0`` (or another protocol: the
libp2p transport fetches rollout bodies too large for gossip the same way), with the framing of
node/transport/carrier.py. An address is a full multiaddr ending in ``/p2p/<libp2p peer id>``;
the remote id a handler sees is the libp2p peer id the noise handshake authenticated.
"""

from __future__ import annotations

import logging

from swarm_node.node.transport.addresses import peer_id_of
from swarm_node.node.transport.carrier import CarrierError, Handler, StreamCarrier
from swarm_node.node.transport.ratelimit import TokenBucket

log = logging.getLogger(__name__)

__all__ = ["Libp2pCarrier", "weights_protocol"]


def weights_protocol(swarm: str) -> str:
    return f"/swarm-node/{swarm}/weights/1.0.0"


class Libp2pCarrier(StreamCarrier):
    def __init__(self, host, protocol: str, upload: TokenBucket | None = None):
        super().__init__(upload)
        self.host, self.protocol = host, protocol  # host: node/transport/libp2p/host.Libp2pHost

    async def start(self, handler: Handler) -> None:
        self._handler = handler
        await self.host.set_stream_handler(self.protocol, self._serve)
        self.address = self.host.addrs[0]

    async def _serve(self, stream) -> None:
        await self.serve_stream(stream.remote, stream, stream)

    def remote_id(self, address: str) -> str:
        peer = peer_id_of(address)
        if peer is None:
            raise CarrierError(f"{address!r} is not a multiaddr ending in /p2p/<peer id>")
        return peer

    async def call(self, address: str, request: bytes, *, max_reply: int, timeout: float) -> tuple[int, bytes]:
        self.remote_id(address)
        try:
            stream = await self.host.open_stream(address, self.protocol, timeout)
        except (ConnectionError, OSError) as e:
            raise CarrierError(f"could not reach {address}: {e}") from e
        return await self.call_on(address, stream, stream, request, max_reply=max_reply, timeout=timeout)

    async def close(self) -> None:
        self.cancel_serving()
