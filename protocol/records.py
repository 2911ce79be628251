"""Owner-signed records for carriers that keep values for anyone to read (an MQTT broker's retained
messages): nobody but the owner can write one that a node accepts.

A broker keeps the last retained message of a topic and hands it to every subscriber; the
topic names its owner (``swarm-node/<swarm>/weights/<source>``: the source), but the broker is
not trusted to have checked who wrote it. So the value travels with its owner's Ed25519 public
key and a signature over (domain, topic, value, expiry): a record cannot be moved to another
topic, attributed to another owner or kept past its expiry. (The hivemind DHT's records are
signed the same way by its record validator, node/transport/hivemind/records.py, over the DHT's key
and subkey instead of a topic.)
"""

from __future__ import annotations

import math

import msgpack
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

from swarm_node.protocol.identity import PUBLIC_KEY_SIZE, Identity, peer_id_from_public_key

__all__ = ["sign_record", "open_record", "MAX_RECORD_BYTES"]

DOMAIN = b"swarm-node/retained-record/v1"
MAX_RECORD_BYTES = 4096  # a pointer or a follower's announcement is a few hundred bytes
_FIELDS = {"d", "pk", "sig", "exp"}


def _signed(topic: str, inner: bytes, expires_at: float) -> bytes:
    return msgpack.packb([DOMAIN, topic, inner, float(expires_at)], use_bin_type=True)


def sign_record(identity: Identity, topic: str, value: dict, expires_at: float) -> bytes:
    inner = msgpack.packb(value, use_bin_type=True)
    sig = identity.sign(_signed(topic, inner, expires_at))
    return msgpack.packb({"d": inner, "pk": identity.public_key_bytes, "sig": sig, "exp": float(expires_at)},
                         use_bin_type=True)


def open_record(data: bytes, topic: str, owner: str, now: float) -> tuple[dict, float] | None:
    """(value, expiry) if ``data`` is a record ``owner`` signed for ``topic`` and it has not
    expired; None for anything else (malformed, another signer, another topic, expired)."""
    if len(data) > MAX_RECORD_BYTES:
        return None
    try:
        w = msgpack.unpackb(data, raw=False)
    except Exception:  # noqa: BLE001 - hostile bytes are simply not a record
        return None
    if not (isinstance(w, dict) and set(w) == _FIELDS and isinstance(w["d"], bytes)
            and isinstance(w["pk"], bytes) and len(w["pk"]) == PUBLIC_KEY_SIZE
            and isinstance(w["sig"], bytes) and isinstance(w["exp"], float) and math.isfinite(w["exp"])):
        return None
    if w["exp"] <= now or peer_id_from_public_key(w["pk"]) != owner:
        return None
    try:
        Ed25519PublicKey.from_public_bytes(w["pk"]).verify(w["sig"], _signed(topic, w["d"], w["exp"]))
        value = msgpack.unpackb(w["d"], raw=False)
    except Exception:  # noqa: BLE001 - InvalidSignature, a bad key, a bad inner value
        return None
    return (value, w["exp"]) if isinstance(value, dict) else None
