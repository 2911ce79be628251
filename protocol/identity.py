"""A node's long-lived cryptographic identity: its Ed25519 key and the peer id derived from it.

Every message a node sends is signed with this key (see ``protocol.signing``), and peers name
each other by ``peer_id``, which is a hash of the public key, so a peer id cannot be claimed
without holding the matching private key.

Key file format: an unencrypted PEM-encoded PKCS#8 Ed25519 private key (what
``openssl genpkey -algorithm ed25519`` writes). It must be a regular file with mode 0600 or
stricter; it is created that way on first run and reused afterwards.

Peer id format: ``"sn1"`` + lowercase, unpadded RFC 4648 base32 of the first 20 bytes of
SHA-256(raw 32-byte public key) -- 35 ASCII characters. ``sn1`` names the scheme version so a
future derivation can coexist.
"""

from __future__ import annotations

import base64
import hashlib
import logging
import os
import re
import secrets
import stat
from dataclasses import dataclass, field
from pathlib import Path

from cryptography.exceptions import UnsupportedAlgorithm
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from swarm_node.protocol.errors import IdentityError

__all__ = [
    "PEER_ID_PREFIX",
    "PEER_ID_RE",
    "PUBLIC_KEY_SIZE",
    "Identity",
    "IdentityError",
    "load_or_create_identity",
    "peer_id_from_public_key",
]

logger = logging.getLogger(__name__)

PEER_ID_PREFIX = "sn1"
PEER_ID_RE = re.compile(r"sn1[a-z2-7]{32}")  # what peer_id_from_public_key makes, exactly
PUBLIC_KEY_SIZE = 32
# 160 bits of the hash: collision-resistant enough for peer naming, and 20 bytes base32-encode
# to exactly 32 characters, so there is never padding to strip.
_PEER_ID_HASH_BYTES = 20
# A PEM Ed25519 key is ~120 bytes; refuse to slurp anything huge put at the path by mistake.
_MAX_KEY_FILE_BYTES = 64 * 1024


def peer_id_from_public_key(public_key: bytes) -> str:
    """Derive the peer id of a raw 32-byte Ed25519 public key (deterministic, see module doc)."""
    if not isinstance(public_key, bytes) or len(public_key) != PUBLIC_KEY_SIZE:
        raise ValueError(f"public key must be {PUBLIC_KEY_SIZE} raw bytes")
    digest = hashlib.sha256(public_key).digest()[:_PEER_ID_HASH_BYTES]
    return PEER_ID_PREFIX + base64.b32encode(digest).decode("ascii").lower().rstrip("=")


@dataclass(frozen=True)
class Identity:
    """A node's signing key with its raw public key and peer id (derived, never stored)."""

    # repr=False: the key must never end up in logs or tracebacks.
    private_key: Ed25519PrivateKey = field(repr=False)
    public_key_bytes: bytes = field(init=False)
    peer_id: str = field(init=False)

    def __post_init__(self) -> None:
        raw = self.private_key.public_key().public_bytes(
            encoding=serialization.Encoding.Raw, format=serialization.PublicFormat.Raw
        )
        # Frozen dataclass: derived fields are set once here, via object.__setattr__.
        object.__setattr__(self, "public_key_bytes", raw)
        object.__setattr__(self, "peer_id", peer_id_from_public_key(raw))

    @classmethod
    def generate(cls) -> Identity:
        """A fresh in-memory identity (tests, ephemeral nodes)."""
        return cls(Ed25519PrivateKey.generate())

    def sign(self, data: bytes) -> bytes:
        """Raw 64-byte Ed25519 signature of ``data``."""
        return self.private_key.sign(data)


def load_or_create_identity(path: Path) -> Identity:
    """Load the node key at ``path``, or create it (mode 0600, atomically) if it does not exist."""
    path = Path(path)
    if not os.path.lexists(path):
        return _create(path)
    return _load(path)


def _load(path: Path) -> Identity:
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError as exc:
        raise IdentityError(
            f"cannot open node key file {path}: {exc.strerror}; fix its permissions or "
            "remove it to generate a new identity"
        ) from exc
    try:
        st = os.fstat(fd)
        # fstat on the opened fd (not stat on the path) so the checks apply to what we read.
        if not stat.S_ISREG(st.st_mode):
            raise IdentityError(
                f"node key path {path} is not a regular file; remove it to generate a new identity"
            )
        mode = stat.S_IMODE(st.st_mode)
        if mode & 0o077:
            raise IdentityError(
                f"node key file {path} has permissions {mode:04o}, readable by other users; "
                f"run `chmod 600 {path}`"
            )
        try:
            with os.fdopen(fd, "rb", closefd=False) as fh:
                data = fh.read(_MAX_KEY_FILE_BYTES + 1)
        except OSError as exc:
            raise IdentityError(
                f"cannot read node key file {path}: {exc.strerror}; fix it or remove it "
                "to generate a new identity"
            ) from exc
    finally:
        os.close(fd)

    if len(data) > _MAX_KEY_FILE_BYTES:
        raise IdentityError(f"node key file {path} is too large to be a PEM Ed25519 key")
    try:
        key = serialization.load_pem_private_key(data, password=None)
    except (ValueError, TypeError, UnsupportedAlgorithm) as exc:
        # TypeError: an encrypted key (we do not support passphrases).
        raise IdentityError(
            f"node key file {path} is not an unencrypted PEM PKCS#8 Ed25519 private key ({exc}); "
            "restore the right file or remove it to generate a new identity"
        ) from exc
    if not isinstance(key, Ed25519PrivateKey):
        raise IdentityError(
            f"node key file {path} holds a {type(key).__name__}, not an Ed25519 key; "
            "remove it to generate a new identity"
        )
    identity = Identity(key)
    logger.info("loaded node identity %s from %s", identity.peer_id, path)
    return identity


def _create(path: Path) -> Identity:
    key = Ed25519PrivateKey.generate()
    pem = key.private_bytes(
        encoding=serialization.Encoding.PEM,
        format=serialization.PrivateFormat.PKCS8,
        encryption_algorithm=serialization.NoEncryption(),
    )
    # Unique temp name in the same directory so os.replace is an atomic rename on one filesystem.
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{secrets.token_hex(4)}.tmp")
    try:
        path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        # Mode 0600 at creation: the key is never on disk with looser permissions, not even briefly.
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        try:
            with os.fdopen(fd, "wb", closefd=False) as fh:
                fh.write(pem)
                fh.flush()
                os.fsync(fh.fileno())
        finally:
            os.close(fd)
        os.replace(tmp, path)
    except OSError as exc:
        _remove_quietly(tmp)
        raise IdentityError(
            f"cannot create node key file {path}: {exc.strerror or exc}; "
            "check that its directory is writable"
        ) from exc
    _fsync_dir(path.parent)
    identity = Identity(key)
    logger.info("created new node identity %s at %s", identity.peer_id, path)
    return identity


def _remove_quietly(tmp: Path) -> None:
    # Cleanup must not mask the original error (e.g. the parent is not a directory at all).
    try:
        tmp.unlink(missing_ok=True)
    except OSError:
        logger.debug("could not remove temporary key file %s", tmp)


def _fsync_dir(directory: Path) -> None:
    # Makes the rename durable across a crash; best-effort because not every OS/fs allows it.
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        logger.debug("fsync of directory %s not supported", directory)
    finally:
        os.close(fd)
