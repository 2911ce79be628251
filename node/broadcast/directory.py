"""Who follows a weight source, and what its newest version is: two kinds of small DHT records.

    key     swarm-node/<swarm>/weights/<source peer id>
    subkey  <source peer id>    value {"k", "v": newest version, "d": manifest digest (hex), "addr"}
    subkey  <follower peer id>  value {"k", "addr": its carrier address, "applied": version or -1}

Each record is owner-signed like every swarm-node DHT value (node/transport/dht_records.py), so
only the source can write the pointer and only a follower its own announcement; the record
validator (node/transport/index_records.py) bounds their shape and life (``WEIGHTS_TTL_S``). The
values are a few hundred bytes: the manifest itself (up to 2 MiB) never enters the DHT, it travels
over the carrier (``["n", source]`` to any holder, or an offer down the tree).

A source reads the followers to order the next manifest's relays: in an order drawn from a hash
of the version and the peer id, so it rotates (the end of the chain, the slowest place to be, is
not always the same node's) and no announcement can buy a place near the source (what a follower
says it applied is a claim, and is not used). At most ``MAX_RELAYS``: followers past that attach
as leaves. A relay that does not serve is routed around (node/broadcast/peer.py).
"""

from __future__ import annotations

import hashlib
import logging
from dataclasses import dataclass

from hivemind.utils import get_dht_time

from node.transport.dht_index import weights_key
from protocol.identity import PEER_ID_RE
from protocol.manifest import MAX_RELAYS, Manifest

log = logging.getLogger(__name__)

__all__ = ["Pointer", "WeightDirectory", "relay_order"]

ANNOUNCE_TTL_S = 120.0


@dataclass(frozen=True)
class Pointer:
    version: int
    digest: bytes
    address: str


def relay_order(followers, next_version: int) -> list[str]:
    """Followers (peer ids) in relay order for ``next_version``; pure, see the module doc."""
    return sorted(followers, key=lambda p: hashlib.sha256(f"{next_version}:{p}".encode()).digest())[:MAX_RELAYS]


class WeightDirectory:
    """Reads and writes one source's weights key through a hivemind ``DHTNode`` whose record
    validator signs for ``me``."""

    def __init__(self, dht_node, swarm: str, source: str, me: str):
        self.node, self.swarm, self.source, self.me = dht_node, swarm, source, me
        self.key = weights_key(swarm, source)

    async def announce_version(self, m: Manifest, address: str, ttl: float = ANNOUNCE_TTL_S) -> bool:
        assert self.me == self.source, "only the source writes its pointer"
        value = {"k": self.key, "v": m.version, "d": m.digest.hex(), "addr": address}
        return bool(await self.node.store(self.key, value, get_dht_time() + ttl, subkey=self.me))

    async def announce_follower(self, address: str, applied: int | None, ttl: float = ANNOUNCE_TTL_S) -> bool:
        value = {"k": self.key, "addr": address, "applied": -1 if applied is None else applied}
        return bool(await self.node.store(self.key, value, get_dht_time() + ttl, subkey=self.me))

    async def read(self) -> tuple[Pointer | None, dict[str, tuple[str, int]]]:
        """(the source's pointer, {follower: (address, applied)}), what the DHT holds now."""
        found = await self.node.get(self.key, latest=True)
        pointer, followers = None, {}
        if found is None or not isinstance(found.value, dict):
            return None, {}
        for peer, entry in found.value.items():
            value = getattr(entry, "value", None)
            if not isinstance(peer, str) or not PEER_ID_RE.fullmatch(peer) or not isinstance(value, dict):
                continue
            if peer == self.source and "v" in value:
                try:
                    pointer = Pointer(value["v"], bytes.fromhex(value["d"]), value["addr"])
                except (KeyError, ValueError, TypeError):
                    continue  # the validator has checked it; a bug elsewhere is no reason to stop
            elif peer != self.source and "applied" in value:
                followers[peer] = (value["addr"], value["applied"])
        return pointer, followers
