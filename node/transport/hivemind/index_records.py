"""The swarm's DHT index records: their values, and what every node keeps (the record validator).

``index_entry`` / ``heartbeat_entry`` build what a publisher stores (keys from
``node/transport/hivemind/index.py``; the value names its own key), ``shard_entries`` reads one
shard back; ``SwarmRecordValidator`` is the
rule every node applies to every record it stores or reads, after ``OwnerSignatureValidator``
(``swarm_validator`` composes the two). Split from the transport so the rule can be read, and
tested, on its own.
"""

from __future__ import annotations

import collections
import math
import re

from hivemind.dht.protocol import DHTProtocol
from hivemind.dht.routing import DHTID
from hivemind.dht.validation import CompositeValidator, DHTRecord, RecordValidatorBase
from hivemind.utils import get_dht_time

from swarm_node.node.transport.base import MAX_ANNOUNCEMENT_SIZE, MAX_ENVELOPE_SIZE
from swarm_node.node.transport.hivemind.index import parse_key, peers_key, round_key, shard_prefix
from swarm_node.node.transport.hivemind.records import CLOCK_SLACK_S, MAX_RECORD_TTL_S, PEER_ID_RE, OwnerSignatureValidator
from swarm_node.protocol.identity import Identity

__all__ = ["ROUND_ENTRY_ROUNDS", "HEARTBEAT_ROUNDS", "index_entry", "heartbeat_entry", "shard_entries",
           "SwarmRecordValidator", "swarm_validator"]

ROUND_ENTRY_ROUNDS = 32  # a round's index entry expires within this many rounds of the round's start
HEARTBEAT_ROUNDS = 8  # no heartbeat record lives longer (an honest one: 3 rounds)
_CLOCK_SLACK_S = CLOCK_SLACK_S
_SHA256_RE = re.compile(r"[0-9a-f]{64}")
_ROUND_FIELDS = {"k", "p2p", "size", "sha256"}
_PEERS_FIELDS = {"k", "hb"}
_POINTER_FIELDS = {"k", "v", "d", "addr"}  # a weight source's newest version (node/transport/hivemind/directory.py)
_FOLLOWER_FIELDS = {"k", "addr", "applied"}  # a follower announcing itself to that source
WEIGHTS_TTL_S = 600.0  # no weights record lives longer (honest ones are re-announced every few rounds)
_MAX_ADDR = 256
# A carrier address: a dialable multiaddr ending in a libp2p id (no /unix, no relay chains; one
# relay hop, ``<relay>/p2p-circuit/p2p/<id>``, for a node behind NAT: node/transport/hivemind/nat.py):
# a follower's address goes into the learner's table of whom to serve first.
_ADDR_RE = re.compile(r"/(ip4|ip6|dns|dns4|dns6)/[0-9A-Za-z.:%-]{1,100}/(tcp|udp)/[0-9]{1,5}(/quic(-v1)?)?"
                      r"(/p2p/[1-9A-HJ-NP-Za-km-z]{30,60}/p2p-circuit)?/p2p/[1-9A-HJ-NP-Za-km-z]{30,60}")
_KEY_MEMO = 65536
# A stored record's value is {"d": value, "pk": 32 bytes, "sig": 64 bytes} (dht_records), plus its
# subkey and expiration on the wire: what an entry costs a reader beyond its own value.
_WRAPPER_BYTES = 120


def index_entry(swarm: str, round: int, peer_id: str, p2p: str, size: int, sha256: str,
                prefix: str = "") -> tuple[str, str, dict]:
    """(key, subkey, value) of a publisher's index entry for ``round`` in the shard ``prefix``
    (``shard_prefix(peer_id, level)``), for ``DHTNode.store(key, value, expiration, subkey=...)``
    by a node whose validator signs for ``peer_id``. The value names its own key, so a validator
    can tell which round and shard a key id is without computing every possible one."""
    key = round_key(swarm, round, prefix)
    return key, peer_id, {"k": key, "p2p": p2p, "size": size, "sha256": sha256}


def heartbeat_entry(swarm: str, peer_id: str, data: bytes, prefix: str = "") -> tuple[str, str, dict]:
    key = peers_key(swarm, prefix)
    return key, peer_id, {"k": key, "hb": data}


def shard_entries(got) -> tuple[dict[str, dict], int]:
    """One shard as ``DHTNode.get_many`` returned it (None if not found): its entries,
    {publisher: value}, and the bytes they cost the reader (each entry's value, subkey and
    signature wrapper, as the replica sent it)."""
    entries: dict[str, dict] = {}
    size = 0
    if got is not None and isinstance(got.value, dict):
        for publisher, entry in got.value.items():
            value = getattr(entry, "value", None)
            if isinstance(publisher, str) and isinstance(value, dict):
                entries[publisher] = value
                size += _WRAPPER_BYTES + len(publisher) + len(DHTProtocol.serializer.dumps(value))
    return entries, size


class SwarmRecordValidator(RecordValidatorBase):
    """What honest nodes accept into (and from) the DHT, after ``OwnerSignatureValidator``
    (``swarm_validator``) has checked that the record is a peer's, signed by that peer, and
    unwrapped its value. hivemind keeps records unauthenticated; without these rules a raw client
    could plant values no node can outlive or read. Every record must be one of the index's:

    - its value names its key (``"k"``), which must hash to the record's key id and parse as a
      swarm-node index key (``node/transport/hivemind/index.py``: round shards and heartbeat shards);
    - the shard is the subkey's: a peer can write only at its own prefix of each level, so keys
      made by the thousand spread over the shards instead of filling the one a reader reads;
    - any record expires within ``MAX_RECORD_TTL_S`` (an hour; ours live a few rounds);
    - this swarm's round entries expire within 32 rounds of the round's start
      (``_round_expiry_cap``), so no entry outlives the rounds anyone reads;
    - round values are exactly ``{k, p2p: str, size: int, sha256: 64 hex}``, heartbeats
      ``{k, hb: bytes}`` up to 8 KiB.

    - only this swarm's keys, and only rounds from 33 back to 2 (plus the clock slack) ahead:
      nothing is kept that no reader will read before it expires;
    - heartbeats expire within ``HEARTBEAT_ROUNDS`` rounds;
    - weights records (node/transport/hivemind/directory.py): ``swarm-node/<swarm>/weights/<source>`` holds
      only the source's pointer ``{k, v: version, d: 64 hex, addr}`` under the source's subkey;
      ``.../weights/<source>/<h[:1]>`` followers' ``{k, addr, applied: int >= -1}`` in their own
      shard; each lives at most ``WEIGHTS_TTL_S``.

    Other swarms' records are refused (a node is no replica for them; a shared bootstrap peer
    keeps any owner-signed record).
    """

    def __init__(self, swarm: str, round_seconds: float):
        self.swarm = swarm
        self.round_seconds = round_seconds
        self._serializer = DHTProtocol.serializer
        self._reserved = set(DHTProtocol.RESERVED_SUBKEYS)
        self._keys: collections.OrderedDict = collections.OrderedDict()  # raw key -> key id (memo)

    def _key_id(self, raw: str) -> bytes:
        kid = self._keys.get(raw)
        if kid is None:
            kid = self._keys[raw] = DHTID.generate(source=raw).to_bytes()
            if len(self._keys) > _KEY_MEMO:
                self._keys.popitem(last=False)
        return kid

    def _round_expiry_cap(self, round: int) -> float:
        """The latest expiration a round's entry may have: ROUND_ENTRY_ROUNDS rounds after the
        round began, plus the clock slack. A swarm-wide constant, not this node's own
        max_round_lag, so every node draws the line in the same place (a replica that keeps what a
        reader refuses serves it entries that reader drops); max_round_lag ≤ 28 keeps honest
        entries (published for max_round_lag + 2 rounds) inside it."""
        return (round + ROUND_ENTRY_ROUNDS) * self.round_seconds + _CLOCK_SLACK_S

    def validate(self, record: DHTRecord) -> bool:
        if not (math.isfinite(record.expiration_time)
                and record.expiration_time <= get_dht_time() + MAX_RECORD_TTL_S + _CLOCK_SLACK_S):
            return False  # (NaN would pass every "too late" comparison)
        if record.subkey in self._reserved:
            return False  # a plain value would replace every peer's entry
        try:
            subkey = self._serializer.loads(record.subkey)
            value = self._serializer.loads(record.value)
        except Exception:  # noqa: BLE001 - hostile bytes
            return False
        if not (isinstance(subkey, str) and PEER_ID_RE.fullmatch(subkey)
                and isinstance(value, dict) and isinstance(value.get("k"), str)):
            return False
        parsed = parse_key(value["k"])
        if parsed is None or self._key_id(value["k"]) != record.key:
            return False
        if parsed.prefix != shard_prefix(subkey, len(parsed.prefix)):
            return False
        if parsed.swarm != self.swarm:
            return False  # a node keeps its own swarm's index only (the bootstrap peer keeps any)
        now = get_dht_time()
        if parsed.kind in ("weights", "followers"):
            return self._weights_ok(parsed.kind, parsed.source, subkey, value, record.expiration_time - now)
        if parsed.kind == "peers":
            # A heartbeat lives 3 rounds: none may outlive HEARTBEAT_ROUNDS, so junk heartbeats
            # cost their sender a store every few rounds, not one an hour.
            return (set(value) == _PEERS_FIELDS and isinstance(value["hb"], bytes)
                    and len(value["hb"]) <= MAX_ANNOUNCEMENT_SIZE
                    and record.expiration_time <= now + HEARTBEAT_ROUNDS * self.round_seconds + _CLOCK_SLACK_S)
        current = int(now // self.round_seconds)
        ahead = 2 + int(_CLOCK_SLACK_S // self.round_seconds)
        if not current - ROUND_ENTRY_ROUNDS - 1 <= parsed.round <= current + ahead:
            return False  # no one reads it, now or before it expires: nothing to plant
        if record.expiration_time > self._round_expiry_cap(parsed.round):
            return False
        return (set(value) == _ROUND_FIELDS
                and isinstance(value["p2p"], str) and len(value["p2p"]) <= 128
                and type(value["size"]) is int and 0 <= value["size"] <= MAX_ENVELOPE_SIZE
                and isinstance(value["sha256"], str) and _SHA256_RE.fullmatch(value["sha256"]) is not None)


    @staticmethod
    def _weights_ok(kind: str, source: str, subkey: str, value: dict, ttl: float) -> bool:
        """A source's weights key holds its pointer under its own subkey and nothing else, so no
        flood of identities can grow it past a reply or hide it; its followers' announcements go
        on their shards (the general shard rule keeps each in its own). Both are small and
        short-lived. Owner signatures (checked first) keep each to its own subkey."""
        if ttl > WEIGHTS_TTL_S + _CLOCK_SLACK_S or not (isinstance(value.get("addr"), str)
                                                        and len(value["addr"]) <= _MAX_ADDR
                                                        and _ADDR_RE.fullmatch(value["addr"])):
            return False
        if kind == "weights":
            return (subkey == source and set(value) == _POINTER_FIELDS and type(value["v"]) is int and 0 <= value["v"] < 2 ** 63
                    and isinstance(value["d"], str) and _SHA256_RE.fullmatch(value["d"]) is not None)
        return (subkey != source and set(value) == _FOLLOWER_FIELDS and type(value["applied"]) is int
                and -1 <= value["applied"] < 2 ** 63)


def swarm_validator(swarm: str, round_seconds: float, signer: Identity | None) -> CompositeValidator:
    """A node's record validator: only owner-signed peer records (signing its own with
    ``signer``), then the index's shape and expiry rules on the unwrapped value."""
    return CompositeValidator([
        OwnerSignatureValidator(signer, only_peer_records=True, max_ttl_s=MAX_RECORD_TTL_S + CLOCK_SLACK_S),
        SwarmRecordValidator(swarm, round_seconds)])
