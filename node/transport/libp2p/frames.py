"""What travels on a libp2p swarm's topics and streams, and whose it is: the topic and protocol
names, the rollout topic's frames (a whole body, or a pointer to one too large for gossip), when a
heartbeat says it was signed, and the swarm peer id a libp2p id or a ``/p2p/`` address names (the
host's key is the node's: node/transport/libp2p/host.py). Used by the transport
(node/transport/libp2p/transport.py) and its directory.
"""

from __future__ import annotations

import msgpack

from swarm_node.node.transport.addresses import peer_id_of
from swarm_node.node.transport.base import MAX_ANNOUNCEMENT_SIZE
from swarm_node.node.transport.libp2p.host import publisher_of
from swarm_node.protocol.signing import envelope_from_bytes

__all__ = ["gossip_topics", "bodies_protocol", "parse_frame", "signed_at", "publisher_of_remote",
           "publisher_of_address"]


def gossip_topics(swarm: str) -> tuple[str, str]:
    return f"swarm-node/{swarm}/rollouts", f"swarm-node/{swarm}/peers"


def bodies_protocol(swarm: str) -> str:
    return f"/swarm-node/{swarm}/bodies/1.0.0"


def parse_frame(data: bytes):
    """(round, body, None) for a whole body, (round, None, (size, sha256, addr)) for a pointer,
    None for anything else."""
    try:
        f = msgpack.unpackb(data, raw=False)
    except Exception:  # noqa: BLE001 - hostile bytes
        return None
    if not isinstance(f, list) or not f or not isinstance(f[0], int) or not 0 <= f[0] < 1 << 40:
        return None
    if len(f) == 2 and isinstance(f[1], bytes):
        return f[0], f[1], None
    if (len(f) == 4 and isinstance(f[1], int) and isinstance(f[2], bytes) and len(f[2]) == 32
            and isinstance(f[3], str) and len(f[3]) < 512):
        return f[0], None, (f[1], f[2], f[3])
    return None


def signed_at(data: bytes) -> float:
    """The timestamp a heartbeat's envelope says it was signed at (unverified; inf if unreadable:
    the full check refuses it)."""
    env = envelope_from_bytes(data) if len(data) <= MAX_ANNOUNCEMENT_SIZE else None
    return env.timestamp if env is not None else float("inf")


def publisher_of_remote(remote: str) -> str | None:
    """The swarm peer id of a libp2p peer id (base58), None if it is not an Ed25519 key's."""
    from libp2p.peer.id import ID

    try:
        return publisher_of(ID.from_base58(remote))
    except Exception:  # noqa: BLE001 - hostile text
        return None


def publisher_of_address(addr: str) -> str | None:
    """The swarm peer id whose key a ``.../p2p/<libp2p id>`` address names."""
    peer = peer_id_of(addr)
    return None if peer is None else publisher_of_remote(peer)
