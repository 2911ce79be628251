"""A weight source's pointer and its followers as retained messages on the MQTT broker.

    topic                                           retained, expiry   record (owner-signed, protocol/records.py)
    swarm-node/<swarm>/weights/<source>             ANNOUNCE_TTL_S     {"v": newest version, "d": manifest digest
                                                                        (hex), "addr": <source peer id>}
    swarm-node/<swarm>/weights/<source>/manifest/<i>  ANNOUNCE_TTL_S   part i of the newest signed manifest itself
    swarm-node/<swarm>/follows/<follower>/<source>  ANNOUNCE_TTL_S     {"addr": <follower peer id>, "applied"}

The owner's id is the topic's third segment in both, so the ACL that keeps every node to its
own topics (``pattern write swarm-node/+/+/%u/#``) covers them; the node checks the signature
anyway, so a broker without that ACL, or one that lies, can withhold a record but not forge one.
A node that subscribes late gets the retained pointer and the retained manifest at once: it
finds the newest weights without waiting for the next version, and without the source having to
answer (the manifest is signed by the source and must hash to the pointer's digest; a follower
takes it only then, else it asks the source and the peers that hold it, as over the DHT). Followers are kept as they arrive (the newest record of
each, ``MAX_FOLLOWERS`` at most: a flood of fresh identities takes no more memory than that, and
``relay_order`` gives strangers no more than a few relay places).
"""

from __future__ import annotations

import logging
import time

from swarm_node.node.transport.directory import ANNOUNCE_TTL_S, HeldDirectory
from swarm_node.node.transport.base import TransportError
from swarm_node.node.transport.mqtt.link import BrokerDown
from swarm_node.node.transport.mqtt.parts import PartError, Reassembler, parse_part
from swarm_node.protocol.identity import PEER_ID_RE, Identity
from swarm_node.protocol.manifest import MAX_MANIFEST_BYTES, Manifest, encode_manifest
from swarm_node.protocol.records import open_record, sign_record

log = logging.getLogger(__name__)

__all__ = ["MqttWeightDirectory"]


class MqttWeightDirectory(HeldDirectory):
    def __init__(self, transport, identity: Identity, source: str):
        super().__init__()
        self.transport, self.identity = transport, identity
        self.source, self.me = source, identity.peer_id
        self._prefix = f"swarm-node/{transport.swarm}"
        self.refused = 0
        self._manifest: bytes | None = None  # the newest retained manifest, whole (checked by its reader)
        self._manifest_parts = Reassembler(2 * MAX_MANIFEST_BYTES)
        self._manifest_sent = 0  # parts of our last retained manifest (a source)

    def _pointer_topic(self) -> str:
        return f"{self._prefix}/weights/{self.source}"

    def _follow_topic(self, follower: str) -> str:
        return f"{self._prefix}/follows/{follower}/{self.source}"

    async def start(self) -> None:
        await self.transport.add_route("weights", self._pointer_topic(), self._on_weights)
        await self.transport.link.subscribe(f"{self._pointer_topic()}/manifest/+", 1)
        # An ACL that will refuse what this node writes here says so now (an empty, unretained
        # message is ignored by every reader), not as versions nobody hears of.
        mine = self._pointer_topic() if self.me == self.source else self._follow_topic(self.me)
        try:
            await self.transport.link.publish(mine, b"", qos=1)
        except PermissionError as e:
            raise TransportError(str(e)) from None
        await self.transport.add_route("follows", f"{self._prefix}/follows/+/{self.source}", self._on_follower)

    # -- incoming ---------------------------------------------------------------------------------
    def _open(self, topic: str, owner: str, payload: bytes) -> tuple[dict, float] | None:
        now = time.time()
        got = open_record(payload, topic, owner, now)
        if got is None:
            self.refused += 1
            return None
        value, exp = got
        return value, min(exp, now + ANNOUNCE_TTL_S)  # a far-future expiry is a claim too

    def _on_weights(self, parts: list[str], payload: bytes) -> None:
        if len(parts) < 4 or parts[3] != self.source or not payload:
            return
        if len(parts) == 6 and parts[4] == "manifest" and parts[5].isascii() and parts[5].isdigit() \
                and len(parts[5]) <= 4:
            try:
                body = self._manifest_parts.add("m", parse_part(payload), MAX_MANIFEST_BYTES, owner=self.source)
            except PartError:
                self.refused += 1
                return
            if body is not None:
                self._manifest = body
            return
        if len(parts) == 4:
            self._on_pointer(parts, payload)

    def _on_pointer(self, parts: list[str], payload: bytes) -> None:
        got = self._open("/".join(parts), self.source, payload)
        if got is None:
            return
        value, exp = got
        try:
            version, digest, addr = int(value["v"]), bytes.fromhex(value["d"]), str(value["addr"])
        except (KeyError, ValueError, TypeError):
            self.refused += 1
            return
        if self._pointer is not None and self._pointer[0]["v"] > version:
            return  # an older record (a broker replaying one) never hides the newer
        self._pointer = ({"v": version, "d": digest, "addr": addr}, exp)

    def _on_follower(self, parts: list[str], payload: bytes) -> None:
        if len(parts) != 5 or parts[4] != self.source or not PEER_ID_RE.fullmatch(parts[3]):
            return
        follower = parts[3]
        if follower == self.source:
            return
        if not payload:
            self._followers.pop(follower, None)  # its retained record was cleared
            return
        got = self._open("/".join(parts), follower, payload)
        # Over a broker a follower's address is its own id: naming another's would send the source's
        # relay traffic to someone else's inbox.
        if got is None:
            return
        if got[0].get("addr") != follower or not isinstance(got[0].get("applied"), int):
            self.refused += 1
            return
        self.keep_follower(follower, *got)

    # -- the Directory ----------------------------------------------------------------------------
    async def _publish(self, topic: str, value: dict, ttl: float) -> bool:
        expires_at = time.time() + ttl
        record = sign_record(self.identity, topic, value, expires_at)
        try:
            await self.transport.link.publish(topic, record, qos=1, retain=True, expiry=ttl)
            return True
        except (BrokerDown, PermissionError) as e:
            log.info("weights directory: %s", e)
            return False

    async def announce_version(self, m: Manifest, address: str, ttl: float = ANNOUNCE_TTL_S) -> bool:
        assert self.me == self.source, "only the source writes its pointer"
        try:  # the manifest first: a reader of the new pointer then finds it retained already
            self._manifest_sent = await self.transport.publish_parts(
                f"{self._pointer_topic()}/manifest", encode_manifest(m), expiry=ttl, previous=self._manifest_sent)
        except (BrokerDown, PermissionError) as e:
            log.info("weights directory: %s", e)
            return False
        return await self._publish(self._pointer_topic(), {"v": m.version, "d": m.digest.hex(), "addr": address}, ttl)

    async def announce_follower(self, address: str, applied: int | None, ttl: float = ANNOUNCE_TTL_S) -> bool:
        return await self._publish(self._follow_topic(self.me),
                                   {"addr": address, "applied": -1 if applied is None else applied}, ttl)

    async def read_manifest(self, digest: bytes) -> bytes | None:
        return self._manifest  # whatever was retained: the caller checks its digest and signature
