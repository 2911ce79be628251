"""Owner-signed DHT records: nobody can write under another peer's subkey.

Every value a swarm-node peer keeps in the hivemind DHT (a round's index entry, a heartbeat) is
stored under a subkey that is its peer id (``sn1…``). hivemind itself keeps whichever value of a
(key, subkey) has the later expiration, from anyone, so an unsigned entry planted under a
victim's subkey with a later expiration would censor the victim for that round. Here the value
travels wrapped with the owner's Ed25519 public key and a signature over (domain, key id,
subkey, value, expiration time); the key must hash to the subkey's peer id.

``OwnerSignatureValidator`` is a hivemind record validator (``RecordValidatorBase``, the model
being hivemind's ``RSASignatureValidator`` with its ``[owner:…]`` subkeys): it signs this
node's own records as the DHT stores them (``sign_value``), strips the wrapper before the
application sees a value (``strip_value``), and refuses, on every store it is asked to keep and
every record a lookup returns, any record under an ``sn1…`` subkey that its owner did not sign.
It needs no knowledge of swarm names or rounds, so the bootstrap peer runs it too: a raw
hivemind client writing straight into the DHT finds no replica that keeps its entry.
"""

from __future__ import annotations

import collections
import hashlib
import math

import msgpack
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey
from hivemind.dht.protocol import DHTProtocol
from hivemind.dht.validation import DHTRecord, RecordValidatorBase
from hivemind.utils import get_dht_time

from swarm_node.protocol.identity import PEER_ID_RE, PUBLIC_KEY_SIZE, Identity, peer_id_from_public_key

__all__ = ["OwnerSignatureValidator", "bootstrap_validator", "signed_bytes", "PEER_ID_RE", "MAX_RECORD_TTL_S"]

DOMAIN = b"swarm-node/dht-record/v1"
_SIGNATURE_SIZE = 64
_FIELDS = {"d", "pk", "sig"}
_VERIFIED_MEMO = 65536  # verified records remembered (each entry ~200 bytes)
MAX_RECORD_TTL_S = 3600.0  # no swarm-node record lives longer (nodes and the bootstrap peer check it)
CLOCK_SLACK_S = 60.0


def signed_bytes(key_id: bytes, subkey: str, inner: bytes, expiration_time: float) -> bytes:
    """What the owner signs: the record's identity and lifetime as well as its value, so a valid
    value cannot be moved to another key, another peer's subkey or a later expiration."""
    return msgpack.packb([DOMAIN, bytes(key_id), subkey, bytes(inner), float(expiration_time)],
                         use_bin_type=True)


class OwnerSignatureValidator(RecordValidatorBase):
    """Signs this peer's records and refuses any ``sn1…``-subkey record its owner did not sign."""

    def __init__(self, signer: Identity | None = None, only_peer_records: bool = False,
                 max_ttl_s: float | None = None):
        self.signer = signer  # None: validate only (the bootstrap peer)
        # The bootstrap peer serves swarm-node swarms only: it keeps nothing but owner-signed peer
        # records, expiring within max_ttl_s. A replica that keeps what the nodes refuse would
        # have its whole reply for the key dropped by them (hivemind checks a dictionary as one).
        self.only_peer_records = only_peer_records
        self.max_ttl_s = max_ttl_s
        self._serializer = DHTProtocol.serializer
        self._verified: collections.OrderedDict = collections.OrderedDict()  # records seen valid

    @property
    def priority(self) -> int:
        return 10  # checked (and stripped) before the schema validator, which sees the inner value

    def _owner(self, record: DHTRecord) -> str | None:
        """The peer id a record's subkey names, or None for records that are not a peer's."""
        if record.subkey == DHTProtocol.IS_REGULAR_VALUE:
            return None
        try:
            subkey = self._serializer.loads(record.subkey)
        except Exception:  # noqa: BLE001 - hostile bytes are simply not ours
            return None
        return subkey if isinstance(subkey, str) and PEER_ID_RE.fullmatch(subkey) else None

    def _unwrap(self, record: DHTRecord) -> dict | None:
        try:
            w = self._serializer.loads(record.value)
        except Exception:  # noqa: BLE001
            return None
        if not (isinstance(w, dict) and set(w) == _FIELDS and isinstance(w["d"], bytes)
                and isinstance(w["pk"], bytes) and len(w["pk"]) == PUBLIC_KEY_SIZE
                and isinstance(w["sig"], bytes) and len(w["sig"]) == _SIGNATURE_SIZE):
            return None
        return w

    def validate(self, record: DHTRecord) -> bool:
        if not math.isfinite(record.expiration_time):
            return False  # NaN passes every bound below and never expires
        if self.max_ttl_s is not None and record.expiration_time > get_dht_time() + self.max_ttl_s:
            return False
        owner = self._owner(record)
        if owner is None:
            return not self.only_peer_records  # not a peer's record: other validators decide
        # Each poll sees the same records again (from every replica, every round of the window):
        # an Ed25519 check costs ~0.1-0.3 ms on the event loop, so a record verified once is
        # remembered (bounded), keyed by everything the signature covers.
        memo = (record.key, record.subkey, hashlib.sha256(record.value).digest(), record.expiration_time)
        if memo in self._verified:
            self._verified.move_to_end(memo)
            return True
        w = self._unwrap(record)
        if w is None or peer_id_from_public_key(w["pk"]) != owner:
            return False
        try:
            Ed25519PublicKey.from_public_bytes(w["pk"]).verify(
                w["sig"], signed_bytes(record.key, owner, w["d"], record.expiration_time))
        except (InvalidSignature, ValueError):
            return False
        self._verified[memo] = True
        if len(self._verified) > _VERIFIED_MEMO:
            self._verified.popitem(last=False)
        return True

    def sign_value(self, record: DHTRecord) -> bytes:
        owner = self._owner(record)
        if owner is None or self.signer is None or owner != self.signer.peer_id:
            return record.value  # not ours to sign: replicas will refuse it if it claims a peer id
        sig = self.signer.sign(signed_bytes(record.key, owner, record.value, record.expiration_time))
        return self._serializer.dumps({"d": record.value, "pk": self.signer.public_key_bytes, "sig": sig})

    def strip_value(self, record: DHTRecord) -> bytes:
        if self._owner(record) is None:
            return record.value
        w = self._unwrap(record)
        return w["d"] if w is not None else record.value

    def merge_with(self, other: RecordValidatorBase) -> bool:
        return False


def bootstrap_validator() -> OwnerSignatureValidator:
    """What the bootstrap peer keeps: owner-signed peer records expiring within the hour, nothing
    else (it serves swarm-node swarms only, and knows none of their names or rounds)."""
    return OwnerSignatureValidator(only_peer_records=True, max_ttl_s=MAX_RECORD_TTL_S + CLOCK_SLACK_S)
