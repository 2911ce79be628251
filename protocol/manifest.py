"""Weight manifests: what a source signs so followers can trust a version's chunks from anyone.

A source node (the learner) cuts one version of its weights (a safetensors file: the full state,
or only the LoRA adapter) into chunks and lists them here: each chunk's SHA-256 and size, the hash
of the whole, the version, the learner step it came from, the model and tokenizer fingerprints
and the relay order of its followers. The source signs the manifest with its Ed25519 node key,
so a follower needs nothing else: every chunk is checked against the list before it is used or
forwarded, whoever served it, and a manifest is accepted only when the followed source signed
it. shardcast (INTELLECT-2) checks one whole-file hash from an unsigned list fetched from the
same relays, which a lying relay can swap; here a relay can only withhold.

Signed bytes::

    b"swarm-node/manifest/v1\\0" | msgpack [swarm, source, public_key, version, step,
        model_fingerprint, tokenizer_fingerprint, format, chunk_size, chunk_hashes, chunk_sizes,
        total_sha256, total_size, relays, fanout, created_at]

Wire form: msgpack map {"v": 1, "m": [the list above], "sig": 64 bytes}. ``decode_manifest``
treats bytes as hostile: size checked before unpacking, msgpack limits, every field checked.
``ManifestCheck`` keeps the newest version accepted from a source, so an older (replayed)
manifest is never taken for a newer one.
"""

from __future__ import annotations

import hashlib
import math
import time
from dataclasses import dataclass, field
from typing import Iterable

import msgpack
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

from swarm_node.protocol.errors import MalformedMessage, MessageTooLarge
from swarm_node.protocol.identity import PUBLIC_KEY_SIZE, Identity, peer_id_from_public_key
from swarm_node.protocol.messages import MAX_FINGERPRINT_CHARS, MAX_SENDER_CHARS, MAX_UINT, _check_str, _check_uint

__all__ = ["FORMATS", "MAX_CHUNK_SIZE", "MAX_CHUNKS", "MAX_MANIFEST_BYTES", "MAX_RELAYS", "Manifest",
           "ManifestCheck", "build_manifest", "choose_chunk_size", "cut_chunks", "decode_manifest", "encode_manifest"]

DOMAIN = b"swarm-node/manifest/v1\0"
WIRE_VERSION = 1
FORMATS = ("safetensors-full", "safetensors-lora")
MAX_CHUNK_SIZE = 16 * 1024 * 1024  # a chunk is held in memory while it is verified and forwarded
MAX_CHUNKS = 16384  # x 16 MiB: 256 GiB of weights, ~0.7 MiB of manifest
MAX_RELAYS = 256  # followers a manifest orders; later ones attach as leaves (node/broadcast/topology.py)
MAX_MANIFEST_BYTES = 2 * 1024 * 1024
_HASH = 32
_SIG = 64


@dataclass(frozen=True)
class Manifest:
    swarm: str
    source: str  # the source's peer id (sn1...): the hash of public_key
    public_key: bytes
    version: int  # the source's weight version, strictly increasing
    step: int  # the learner step these weights came from
    model_fingerprint: str
    tokenizer_fingerprint: str
    format: str  # one of FORMATS
    chunk_size: int
    chunk_hashes: tuple[bytes, ...]  # SHA-256 of each chunk
    chunk_sizes: tuple[int, ...]
    total_sha256: bytes  # of the whole file, checked once more before it is applied
    total_size: int
    relays: tuple[str, ...]  # followers in relay order (peer ids), as the source saw them announced
    fanout: int  # children per node in the relay tree (1: a chain); node/broadcast/topology.py
    created_at: float
    signature: bytes = field(default=b"", repr=False)

    def __post_init__(self) -> None:
        _check_str(self.swarm, "swarm", MAX_SENDER_CHARS)
        _check_str(self.source, "source", MAX_SENDER_CHARS)
        if type(self.public_key) is not bytes or len(self.public_key) != PUBLIC_KEY_SIZE:
            raise MalformedMessage("public_key", f"expected {PUBLIC_KEY_SIZE} bytes")
        if peer_id_from_public_key(self.public_key) != self.source:
            raise MalformedMessage("source", "is not the peer id of public_key")
        _check_uint(self.version, "version")
        _check_uint(self.step, "step")
        _check_str(self.model_fingerprint, "model_fingerprint", MAX_FINGERPRINT_CHARS)
        _check_str(self.tokenizer_fingerprint, "tokenizer_fingerprint", MAX_FINGERPRINT_CHARS)
        if self.format not in FORMATS:
            raise MalformedMessage("format", f"{self.format!r} is not one of {FORMATS}")
        _check_uint(self.chunk_size, "chunk_size", MAX_CHUNK_SIZE)
        if self.chunk_size == 0:
            raise MalformedMessage("chunk_size", "must be positive")
        for name, items in (("chunk_hashes", self.chunk_hashes), ("chunk_sizes", self.chunk_sizes),
                            ("relays", self.relays)):
            if type(items) is not tuple:
                raise MalformedMessage(name, f"expected tuple, got {type(items).__name__}")
        n = len(self.chunk_hashes)
        if not 1 <= n <= MAX_CHUNKS or len(self.chunk_sizes) != n:
            raise MalformedMessage("chunk_hashes", f"{n} hashes and {len(self.chunk_sizes)} sizes "
                                   f"(1..{MAX_CHUNKS}, one size per hash)")
        for i, h in enumerate(self.chunk_hashes):
            if type(h) is not bytes or len(h) != _HASH:
                raise MalformedMessage(f"chunk_hashes[{i}]", f"expected {_HASH} bytes")
        # Every chunk is chunk_size bytes but the last (1..chunk_size): the sizes add up to the
        # total, so a source cannot declare more than it signs for.
        for i, s in enumerate(self.chunk_sizes):
            _check_uint(s, f"chunk_sizes[{i}]", self.chunk_size)
            if s != self.chunk_size and i != n - 1 or s == 0:
                raise MalformedMessage(f"chunk_sizes[{i}]", "only the last chunk may be short")
        _check_uint(self.total_size, "total_size")
        if sum(self.chunk_sizes) != self.total_size:
            raise MalformedMessage("total_size", "is not the sum of the chunk sizes")
        if type(self.total_sha256) is not bytes or len(self.total_sha256) != _HASH:
            raise MalformedMessage("total_sha256", f"expected {_HASH} bytes")
        if len(self.relays) > MAX_RELAYS:
            raise MalformedMessage("relays", f"{len(self.relays)} relays, over the limit of {MAX_RELAYS}")
        for i, r in enumerate(self.relays):
            _check_str(r, f"relays[{i}]", MAX_SENDER_CHARS)
        if len(set(self.relays)) != len(self.relays) or self.source in self.relays:
            raise MalformedMessage("relays", "repeats a peer, or names the source")
        _check_uint(self.fanout, "fanout", MAX_RELAYS)
        if self.fanout == 0:
            raise MalformedMessage("fanout", "must be positive")
        if type(self.created_at) is not float or not math.isfinite(self.created_at):
            raise MalformedMessage("created_at", "expected a finite float")
        if type(self.signature) is not bytes:
            raise MalformedMessage("signature", "expected bytes")

    @property
    def n_chunks(self) -> int:
        return len(self.chunk_hashes)

    @property
    def digest(self) -> bytes:
        """What names this manifest in chunk requests and DHT pointers: SHA-256 of its signed bytes."""
        return hashlib.sha256(self.signed_bytes()).digest()

    def signed_bytes(self) -> bytes:
        return DOMAIN + msgpack.packb(self._fields(), use_bin_type=True)

    def _fields(self) -> list:
        return [self.swarm, self.source, self.public_key, self.version, self.step, self.model_fingerprint,
                self.tokenizer_fingerprint, self.format, self.chunk_size, list(self.chunk_hashes),
                list(self.chunk_sizes), self.total_sha256, self.total_size, list(self.relays), self.fanout,
                self.created_at]

    def signature_ok(self) -> bool:
        try:
            Ed25519PublicKey.from_public_bytes(self.public_key).verify(self.signature, self.signed_bytes())
            return True
        except (InvalidSignature, ValueError):
            return False

    def chunk_ok(self, index: int, data: bytes) -> bool:
        return (0 <= index < self.n_chunks and len(data) == self.chunk_sizes[index]
                and hashlib.sha256(data).digest() == self.chunk_hashes[index])


def choose_chunk_size(total: int) -> int:
    """256 KiB, or bigger for states over 4 GiB (MAX_CHUNKS). Each relay forwards a chunk once it
    holds all of it, so a chain of n adds (n - 1) chunk times to one copy's time: small chunks keep
    that short (scripts/bench_broadcast.py: 1.26x S/U with 512 KiB, 1.14x with 256 KiB at N = 8);
    each chunk is one request, so much smaller ones pay per-request overhead instead."""
    size = 256 * 1024
    while size * MAX_CHUNKS < total and size < MAX_CHUNK_SIZE:
        size *= 2
    return size


def cut_chunks(data: bytes, chunk_size: int) -> list[memoryview]:
    """``data`` in chunk_size slices (views: no copy of a multi-GB state)."""
    view = memoryview(data)
    return [view[i:i + chunk_size] for i in range(0, max(len(data), 1), chunk_size)]


def build_manifest(data: bytes, identity: Identity, *, swarm: str, version: int, step: int,
                   model_fingerprint: str, tokenizer_fingerprint: str, format: str, chunk_size: int,
                   relays: Iterable[str] = (), fanout: int = 1, now: float | None = None) -> Manifest:
    """The signed manifest of one version's bytes."""
    if not data:
        raise ValueError("a weight version cannot be empty")
    chunks = cut_chunks(data, chunk_size)
    unsigned = Manifest(
        swarm=swarm, source=identity.peer_id, public_key=identity.public_key_bytes, version=version, step=step,
        model_fingerprint=model_fingerprint, tokenizer_fingerprint=tokenizer_fingerprint, format=format,
        chunk_size=chunk_size, chunk_hashes=tuple(hashlib.sha256(c).digest() for c in chunks),
        chunk_sizes=tuple(len(c) for c in chunks), total_sha256=hashlib.sha256(data).digest(),
        total_size=len(data), relays=tuple(r for r in dict.fromkeys(relays) if r != identity.peer_id)[:MAX_RELAYS],
        fanout=fanout, created_at=float(time.time() if now is None else now))
    return _with_signature(unsigned, identity.sign(unsigned.signed_bytes()))


def _with_signature(m: Manifest, signature: bytes) -> Manifest:
    fields = {k: getattr(m, k) for k in Manifest.__dataclass_fields__}
    return Manifest(**{**fields, "signature": signature})


def encode_manifest(m: Manifest) -> bytes:
    return msgpack.packb({"v": WIRE_VERSION, "m": m._fields(), "sig": m.signature}, use_bin_type=True)


_NAMES = ("swarm", "source", "public_key", "version", "step", "model_fingerprint", "tokenizer_fingerprint",
          "format", "chunk_size", "chunk_hashes", "chunk_sizes", "total_sha256", "total_size", "relays",
          "fanout", "created_at")


def decode_manifest(data: bytes) -> Manifest:
    """Bytes from any peer -> a well-formed Manifest (signature not checked: ``ManifestCheck``).
    Raises ``MessageTooLarge`` / ``MalformedMessage``."""
    if type(data) is not bytes:
        raise MalformedMessage("<manifest>", f"expected bytes, got {type(data).__name__}")
    if len(data) > MAX_MANIFEST_BYTES:
        raise MessageTooLarge(len(data), MAX_MANIFEST_BYTES)
    try:
        obj = msgpack.unpackb(data, raw=False, strict_map_key=True, max_bin_len=MAX_MANIFEST_BYTES,
                              max_str_len=MAX_MANIFEST_BYTES, max_array_len=MAX_CHUNKS, max_map_len=8,
                              max_ext_len=0)
    except Exception as e:  # msgpack raises a zoo (ValueError, ExtraData, FormatError, ...)
        raise MalformedMessage("<manifest>", f"not msgpack: {type(e).__name__}") from e
    if type(obj) is not dict or set(obj) != {"v", "m", "sig"}:
        raise MalformedMessage("<manifest>", "expected a map with keys v, m, sig")
    if obj["v"] != WIRE_VERSION:
        raise MalformedMessage("v", f"unsupported manifest version {obj['v']!r}")
    items = obj["m"]
    if type(items) is not list or len(items) != len(_NAMES):
        raise MalformedMessage("m", f"expected a list of {len(_NAMES)} fields")
    body = dict(zip(_NAMES, items))
    for name in ("chunk_hashes", "chunk_sizes", "relays"):
        if type(body[name]) is not list:
            raise MalformedMessage(name, "expected a list")
        body[name] = tuple(body[name])
    try:
        return Manifest(**body, signature=obj["sig"])
    except (TypeError, ValueError) as e:  # a str where an int is due, ... (MalformedMessage passes)
        if isinstance(e, MalformedMessage):
            raise
        raise MalformedMessage("m", str(e)) from e


@dataclass
class ManifestCheck:
    """Which manifests a follower acts on: signed by the source it follows, for its swarm, newer
    than any it accepted before (``newest`` survives restarts when the caller persists it)."""

    swarm: str
    source: str
    newest: int = -1
    refused: dict = field(default_factory=dict)  # reason -> count

    def accept(self, m: Manifest) -> bool:
        reason = self.reason(m)
        if reason is not None:
            self.refused[reason] = self.refused.get(reason, 0) + 1
            return False
        self.newest = m.version
        return True

    def reason(self, m: Manifest) -> str | None:
        if m.source != self.source:
            return "not_followed_source"  # a valid manifest, signed by someone else
        if m.swarm != self.swarm:
            return "wrong_swarm"
        if not m.signature_ok():
            return "bad_signature"
        if m.version <= self.newest:
            return "old_version"  # a replay, or the one we have
        if m.version > MAX_UINT - 1:
            return "bad_version"
        return None
