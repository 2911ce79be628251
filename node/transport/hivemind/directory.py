"""Who follows a weight source, and what its newest version is: small DHT records (hivemind).

    key  swarm-node/<swarm>/weights/<source>          subkey <source>    {"k", "v": newest version,
                                                                          "d": manifest digest (hex), "addr"}
    key  swarm-node/<swarm>/weights/<source>/<h[:1]>  subkey <follower>  {"k", "addr": its carrier address,
                                                                          "applied": version or -1}

Each record is owner-signed like every swarm-node DHT value (node/transport/hivemind/records.py), so
only the source can write the pointer and only a follower its own announcement; the record
validator (node/transport/hivemind/index_records.py) keeps the pointer's key to the source's subkey
alone (a flood of fresh identities cannot grow it past a reply, or hide the pointer) and each
announcement to its follower's shard (16, by the hash of its id). The values are a few hundred
bytes: the manifest itself (up to 2 MiB) never enters the DHT, it travels over the carrier
(``["m", digest]`` to any holder, or an offer down the tree).

A source reads every shard to order the next manifest's relays (``relay_order``): first the
followers it has *vouched* for (their rollouts, made with its versions, were admitted: work a
fresh identity has not done), then at most ``MAX_UNVOUCHED_RELAYS`` others; each group in an
order drawn from a hash of the version and the peer id, so it rotates (the end of the chain,
the slowest place to be, is not always the same node's) and no announcement can buy a place
(what a follower says it applied is a claim, and is not used: node/transport/directory.py).
Everyone else attaches as a leaf (node/broadcast/topology.py), so identities that never serve
can stand in front of at most a few honest followers. A follower reads the pointer, and only the shards of the peers it
receives from. A relay that does not serve is routed around (node/broadcast/peer.py).
"""

from __future__ import annotations

import asyncio
import logging

from hivemind.utils import get_dht_time

from swarm_node.node.transport.hivemind.index import FOLLOWER_LEVEL, SHARD_FANOUT, followers_key, shard_prefix, weights_key
from swarm_node.node.transport.directory import ANNOUNCE_TTL_S, MAX_UNVOUCHED_RELAYS, Directory, Pointer, relay_order
from swarm_node.protocol.identity import PEER_ID_RE
from swarm_node.protocol.manifest import Manifest

log = logging.getLogger(__name__)

__all__ = ["Pointer", "WeightDirectory", "relay_order", "MAX_UNVOUCHED_RELAYS"]  # (re-exported)

def _all_prefixes() -> list[str]:
    return [format(i, "x") for i in range(SHARD_FANOUT ** FOLLOWER_LEVEL)]


class WeightDirectory(Directory):
    """Reads and writes one source's weights records through a hivemind ``DHTNode`` whose record
    validator signs for ``me``."""

    def __init__(self, dht_node, swarm: str, source: str, me: str):
        self.node, self.swarm, self.source, self.me = dht_node, swarm, source, me
        self.key = weights_key(swarm, source)

    def _shard_key(self, peer: str) -> str:
        return followers_key(self.swarm, self.source, shard_prefix(peer, FOLLOWER_LEVEL))

    async def announce_version(self, m: Manifest, address: str, ttl: float = ANNOUNCE_TTL_S) -> bool:
        assert self.me == self.source, "only the source writes its pointer"
        value = {"k": self.key, "v": m.version, "d": m.digest.hex(), "addr": address}
        return bool(await self.node.store(self.key, value, get_dht_time() + ttl, subkey=self.me))

    async def announce_follower(self, address: str, applied: int | None, ttl: float = ANNOUNCE_TTL_S) -> bool:
        key = self._shard_key(self.me)
        value = {"k": key, "addr": address, "applied": -1 if applied is None else applied}
        return bool(await self.node.store(key, value, get_dht_time() + ttl, subkey=self.me))

    async def read_pointer(self) -> Pointer | None:
        """The source's newest version, as its pointer says (None: none announced, or expired)."""
        found = await self.node.get(self.key, latest=True)
        entry = found.value.get(self.source) if found is not None and isinstance(found.value, dict) else None
        value = getattr(entry, "value", None)
        if not isinstance(value, dict):
            return None
        try:
            return Pointer(value["v"], bytes.fromhex(value["d"]), value["addr"])
        except (KeyError, ValueError, TypeError):
            return None  # the validator has checked it; a bug elsewhere is no reason to stop

    async def read_followers(self, near: list[str] | None = None) -> dict[str, tuple[str, int]]:
        """{follower: (address, applied)} from the shards of the peers in ``near`` (all shards
        when None), what the DHT holds now."""
        prefixes = (_all_prefixes() if near is None
                    else list(dict.fromkeys(shard_prefix(p, FOLLOWER_LEVEL) for p in near)))
        keys = [followers_key(self.swarm, self.source, x) for x in prefixes]
        # One read per shard: a shard stuffed past a DHT reply by ground ids fails alone.
        results = await asyncio.gather(*(self.node.get(k, latest=True) for k in keys), return_exceptions=True)
        followers = {}
        for key, got in zip(keys, results):
            if isinstance(got, BaseException):
                log.info("weights directory: reading %s: %s: %s", key, type(got).__name__, got)
                continue
            if got is None or not isinstance(got.value, dict):
                continue
            for peer, entry in got.value.items():
                value = getattr(entry, "value", None)
                if (isinstance(peer, str) and PEER_ID_RE.fullmatch(peer) and peer != self.source
                        and isinstance(value, dict) and "applied" in value):
                    followers[peer] = (value["addr"], value["applied"])
        return followers
