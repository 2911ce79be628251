"""A weight source's pointer and its followers as owner-signed records gossiped on one topic.

    gossip topic: swarm-node/<swarm>/weights     message: [key, record]

    key                          record (owner-signed over swarm-node/<swarm>/<key>, protocol/records.py)
    weights/<source>             {"v": newest version, "d": manifest digest (hex), "addr": the source's multiaddr}
    follows/<follower>/<source>  {"addr": the follower's multiaddr, "applied": its version or -1}

Gossip keeps nothing, so every owner re-gossips its newest record every ``REPUBLISH_S`` while it
is valid: a node that joins late hears the pointer within that, and asks the source (or the
peers that hold it) for the manifest the pointer names, as over the DHT.

The topic's validator (run before gossipsub forwards anything) passes a record only if the key's
owner is the message's origin (libp2p authenticates it) and the record is signed by that owner
for that key and unexpired; an address must be its owner's own (its /p2p/ id is the owner's
key), so no record can send the source's relay traffic to someone else. A bad record goes no
further than the first node. Before that check, a budget (node/transport/libp2p/budget.py) passes
one record a second per origin, and origins with no admitted rollouts share the strangers'
checks; the followed source's records always pass. Followers are kept as they arrive (the newest record of each,
``MAX_FOLLOWERS`` at most; ``relay_order`` gives strangers no more than a few relay places).
"""

from __future__ import annotations

import asyncio
import logging
import time

import msgpack

from swarm_node.node.transport.directory import ANNOUNCE_TTL_S, HeldDirectory
from swarm_node.node.transport.libp2p.budget import CheckBudget
from swarm_node.node.transport.libp2p.frames import publisher_of_address
from swarm_node.protocol.identity import PEER_ID_RE, Identity
from swarm_node.protocol.manifest import Manifest
from swarm_node.protocol.records import MAX_RECORD_BYTES, open_record, sign_record

log = logging.getLogger(__name__)

__all__ = ["Libp2pWeightDirectory", "weights_topic", "REPUBLISH_S"]

REPUBLISH_S = 5.0


def weights_topic(swarm: str) -> str:
    return f"swarm-node/{swarm}/weights"


def parse_key(key: str) -> tuple[str, str, str | None] | None:
    """("weights", source, None) or ("follows", follower, source), or None."""
    parts = key.split("/")
    if len(parts) == 2 and parts[0] == "weights" and PEER_ID_RE.fullmatch(parts[1]):
        return "weights", parts[1], None
    if len(parts) == 3 and parts[0] == "follows" and PEER_ID_RE.fullmatch(parts[1]) and PEER_ID_RE.fullmatch(parts[2]):
        return "follows", parts[1], parts[2]
    return None


class Libp2pWeightDirectory(HeldDirectory):
    def __init__(self, transport, identity: Identity, source: str):
        super().__init__()
        self.transport, self.identity = transport, identity  # transport: node/transport/libp2p.Libp2pTransport
        self.source, self.me = source, identity.peer_id
        self._prefix = f"swarm-node/{transport.swarm}"
        self._topic = weights_topic(transport.swarm)
        self._mine: tuple[bytes, float] | None = None  # our newest message and its expiry: re-gossiped
        self._task: asyncio.Task | None = None
        self.refused = 0
        self.over_budget = 0
        self._budget = CheckBudget(heartbeat_gap_s=1.0)  # the trio thread's

    async def start(self) -> None:
        await self.transport.host.subscribe(self._topic, self._on_message, self._check, self._afford)
        self._task = asyncio.ensure_future(self._republish())

    async def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)

    # -- checking (the budget on the trio thread, then a worker thread, before forwarding) ---------
    def _afford(self, origin: str, data: bytes) -> bool:
        if origin == self.source:
            return True
        if self._budget.heartbeat(origin, self.transport.inbox.is_vouched(origin), time.monotonic()) is None:
            return True
        self.transport.host.bridge.to_loop(self._count_over_budget)
        return False

    def _count_over_budget(self) -> None:
        self.over_budget += 1

    def _open(self, origin: str, data: bytes) -> tuple[tuple, dict, float] | None:
        if len(data) > MAX_RECORD_BYTES + 256:
            return None
        try:
            key, record = msgpack.unpackb(data, raw=False)
            parsed = parse_key(key)
        except Exception:  # noqa: BLE001 - hostile bytes
            return None
        if parsed is None or parsed[1] != origin or not isinstance(record, bytes):
            return None
        now = time.time()
        got = open_record(record, f"{self._prefix}/{key}", origin, now)
        if got is None:
            return None
        value, exp = got
        addr = value.get("addr")
        if not isinstance(addr, str) or publisher_of_address(addr) != origin:
            return None
        if parsed[0] == "weights" and not (isinstance(value.get("v"), int) and isinstance(value.get("d"), str)):
            return None
        if parsed[0] == "follows" and not isinstance(value.get("applied"), int):
            return None
        return parsed, value, min(exp, now + ANNOUNCE_TTL_S)  # a far-future expiry is a claim too

    def _check(self, origin: str, data: bytes) -> bool:
        if self._open(origin, data) is None:
            self.transport.host.bridge.to_loop(self._count_refused)
            return False
        return True

    def _count_refused(self) -> None:
        self.refused += 1

    # -- incoming (the loop) ----------------------------------------------------------------------
    def _on_message(self, origin: str, data: bytes) -> None:
        got = self._open(origin, data)
        if got is None:
            return
        (kind, owner, source), value, exp = got
        if kind == "weights" and owner == self.source:
            try:
                version, digest = int(value["v"]), bytes.fromhex(value["d"])
            except (KeyError, ValueError, TypeError):
                return
            if self._pointer is not None and self._pointer[0]["v"] > version and self._pointer[1] > time.time():
                return  # an older record never hides the newer
            self._pointer = ({"v": version, "d": digest, "addr": value["addr"]}, exp)
        elif kind == "follows" and source == self.source and owner != self.source:
            self.keep_follower(owner, value, exp)

    # -- outgoing ---------------------------------------------------------------------------------
    async def _publish(self, key: str, value: dict, ttl: float) -> bool:
        expires_at = time.time() + ttl
        data = msgpack.packb([key, sign_record(self.identity, f"{self._prefix}/{key}", value, expires_at)])
        self._mine = (data, expires_at)
        try:
            await self.transport.host.publish(self._topic, data)
            return True
        except Exception as e:  # noqa: BLE001 - no mesh yet, a closing host: the republish tries again
            log.info("weights directory: %s", e)
            return False

    async def _republish(self) -> None:
        while True:
            await asyncio.sleep(REPUBLISH_S)
            if self._mine is not None and self._mine[1] > time.time():
                try:
                    await self.transport.host.publish(self._topic, self._mine[0])
                except Exception as e:  # noqa: BLE001
                    log.debug("re-gossiping the directory record: %s", e)

    async def announce_version(self, m: Manifest, address: str, ttl: float = ANNOUNCE_TTL_S) -> bool:
        assert self.me == self.source, "only the source writes its pointer"
        return await self._publish(f"weights/{self.source}", {"v": m.version, "d": m.digest.hex(), "addr": address}, ttl)

    async def announce_follower(self, address: str, applied: int | None, ttl: float = ANNOUNCE_TTL_S) -> bool:
        return await self._publish(f"follows/{self.me}/{self.source}",
                                   {"addr": address, "applied": -1 if applied is None else applied}, ttl)
