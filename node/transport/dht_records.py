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

import re

import msgpack
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey
from hivemind.dht.protocol import DHTProtocol
from hivemind.dht.validation import DHTRecord, RecordValidatorBase

from protocol.identity import PUBLIC_KEY_SIZE, Identity, peer_id_from_public_key

__all__ = ["OwnerSignatureValidator", "signed_bytes", "PEER_ID_RE"]

DOMAIN = b"swarm-node/dht-record/v1"
PEER_ID_RE = re.compile(r"sn1[a-z2-7]{32}")
_SIGNATURE_SIZE = 64
_FIELDS = {"d", "pk", "sig"}


def signed_bytes(key_id: bytes, subkey: str, inner: bytes, expiration_time: float) -> bytes:
    """What the owner signs: the record's identity and lifetime as well as its value, so a valid
    value cannot be moved to another key, another peer's subkey or a later expiration."""
    return msgpack.packb([DOMAIN, bytes(key_id), subkey, bytes(inner), float(expiration_time)],
                         use_bin_type=True)


class OwnerSignatureValidator(RecordValidatorBase):
    """Signs this peer's records and refuses any ``sn1…``-subkey record its owner did not sign."""

    def __init__(self, signer: Identity | None = None):
        self.signer = signer  # None: validate only (the bootstrap peer)
        self._serializer = DHTProtocol.serializer

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
        owner = self._owner(record)
        if owner is None:
            return True  # not a peer's record: other validators decide
        w = self._unwrap(record)
        if w is None or peer_id_from_public_key(w["pk"]) != owner:
            return False
        try:
            Ed25519PublicKey.from_public_bytes(w["pk"]).verify(
                w["sig"], signed_bytes(record.key, owner, w["d"], record.expiration_time))
        except (InvalidSignature, ValueError):
            return False
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
