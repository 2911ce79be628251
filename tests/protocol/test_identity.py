"""Node identity: key file creation (0600, atomic), reuse, refusal of unsafe/garbage files."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from swarm_node.protocol.errors import SwarmError
from swarm_node.protocol.identity import (
    Identity,
    IdentityError,
    load_or_create_identity,
    peer_id_from_public_key,
)


def test_created_with_mode_0600_in_new_parent_dirs(tmp_path: Path) -> None:
    path = tmp_path / "a" / "b" / "node.key"
    ident = load_or_create_identity(path)
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert path.read_bytes().startswith(b"-----BEGIN PRIVATE KEY-----")
    assert len(ident.public_key_bytes) == 32
    assert ident.peer_id == peer_id_from_public_key(ident.public_key_bytes)
    # No temp files left behind.
    assert sorted(p.name for p in path.parent.iterdir()) == ["node.key"]


def test_reused_on_second_call(tmp_path: Path) -> None:
    path = tmp_path / "node.key"
    first = load_or_create_identity(path)
    second = load_or_create_identity(path)
    assert first.peer_id == second.peer_id
    assert first.public_key_bytes == second.public_key_bytes


def test_loose_permissions_rejected_with_chmod_hint(tmp_path: Path) -> None:
    path = tmp_path / "node.key"
    load_or_create_identity(path)
    os.chmod(path, 0o644)
    with pytest.raises(IdentityError, match=r"chmod 600") as info:
        load_or_create_identity(path)
    assert str(path) in str(info.value)
    assert isinstance(info.value, SwarmError)
    os.chmod(path, 0o600)
    load_or_create_identity(path)  # fixed -> loads again


def test_garbage_file_rejected(tmp_path: Path) -> None:
    path = tmp_path / "node.key"
    fd = os.open(path, os.O_WRONLY | os.O_CREAT, 0o600)
    os.write(fd, b"definitely not a key\n")
    os.close(fd)
    with pytest.raises(IdentityError, match="not an unencrypted PEM") as info:
        load_or_create_identity(path)
    assert str(path) in str(info.value)


def test_non_ed25519_key_rejected(tmp_path: Path) -> None:
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import ec

    pem = ec.generate_private_key(ec.SECP256R1()).private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )
    path = tmp_path / "node.key"
    fd = os.open(path, os.O_WRONLY | os.O_CREAT, 0o600)
    os.write(fd, pem)
    os.close(fd)
    with pytest.raises(IdentityError, match="not an Ed25519 key"):
        load_or_create_identity(path)


def test_unreadable_path_rejected(tmp_path: Path) -> None:
    path = tmp_path / "node.key"
    path.mkdir(mode=0o700)
    with pytest.raises(IdentityError, match="not a regular file") as info:
        load_or_create_identity(path)
    assert str(path) in str(info.value)


def test_uncreatable_path_rejected(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_bytes(b"")
    with pytest.raises(IdentityError, match="cannot create"):
        load_or_create_identity(blocker / "node.key")  # parent is a file


def test_peer_id_deterministic_and_distinct() -> None:
    a, b = Identity.generate(), Identity.generate()
    assert peer_id_from_public_key(a.public_key_bytes) == a.peer_id
    assert peer_id_from_public_key(bytes(a.public_key_bytes)) == a.peer_id
    assert a.peer_id != b.peer_id
    assert a.peer_id.startswith("sn1") and len(a.peer_id) == 35
    assert a.peer_id == a.peer_id.lower() and "=" not in a.peer_id
    # Pinned vector: the derivation is part of the protocol and must not drift.
    assert peer_id_from_public_key(bytes(32)) == "sn1mzuhvlpymk6xo3epygfy5h4oeaejofef"
    with pytest.raises(ValueError):
        peer_id_from_public_key(b"short")


def test_private_key_not_in_repr() -> None:
    ident = Identity.generate()
    assert "private_key" not in repr(ident)
