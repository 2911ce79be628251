"""Where a follower keeps weight chunks on disk, so a restart resumes a transfer.

Chunks are content-addressed (``chunks/<sha256 hex>``), written to a temporary file and renamed,
so a node killed mid-write leaves no half chunk under a real name; every chunk read back is
hashed again before it is served or used (a disk can rot, a file can be edited). ``pending``
is the signed manifest of the version being fetched, ``applied`` the last version applied
whole: a restarted follower loads ``applied`` (its last good weights) and resumes ``pending``
from the chunks it has. A chunk unchanged between versions is never fetched twice.

The bound on disk: ``prune(keep)`` deletes every chunk the manifests in ``keep`` do not list and
refuses such chunks from then on (a write still finishing for a version just abandoned is
deleted as it lands). The fetch keeps the last applied version and the one it is fetching, so
at most two versions' chunks are on disk, however many versions were abandoned midway.
"""

from __future__ import annotations

import hashlib
import os
import threading
from pathlib import Path

from swarm_node.protocol.errors import ProtocolError
from swarm_node.protocol.manifest import Manifest, decode_manifest, encode_manifest

__all__ = ["ChunkStore"]


class ChunkStore:
    def __init__(self, root: Path):
        self.root = Path(root)
        (self.root / "chunks").mkdir(parents=True, exist_ok=True)
        self.wanted: set[str] | None = None  # names of the chunks kept (None: all, until a prune)

    def _path(self, digest: bytes) -> Path:
        return self.root / "chunks" / digest.hex()

    def get(self, digest: bytes) -> bytes | None:
        """The chunk with this SHA-256, or None (absent, or no longer what its name says)."""
        try:
            data = self._path(digest).read_bytes()
        except OSError:
            return None
        if hashlib.sha256(data).digest() != digest:
            self._path(digest).unlink(missing_ok=True)  # rotted or edited: fetch it again
            return None
        return data

    def put(self, digest: bytes, data: bytes | memoryview) -> None:
        """Keep a chunk, unless the last ``prune`` left it out (its version was abandoned)."""
        path = self._path(digest)
        if not self._wanted(path.name) or path.exists():
            return
        tmp = path.with_name(f"{path.name}.tmp{os.getpid()}-{threading.get_ident()}")  # two writers, one hash
        with open(tmp, "wb") as f:
            f.write(data)
        os.replace(tmp, path)
        if not self._wanted(path.name):  # pruned while it was written: prune set ``wanted``
            path.unlink(missing_ok=True)  # first and listed after, so one of the two deletes it

    def _wanted(self, name: str) -> bool:
        wanted = self.wanted
        return wanted is None or name in wanted

    def save_manifest(self, slot: str, m: Manifest) -> None:
        """``slot``: "pending" or "applied"; atomically replaced."""
        path = self.root / f"{slot}.manifest"
        tmp = path.with_name(path.name + ".tmp")
        with open(tmp, "wb") as f:
            f.write(encode_manifest(m))
            f.flush()
            os.fsync(f.fileno())  # a source's "published" must outlive a power cut: never sign twice
        os.replace(tmp, path)
        fd = os.open(self.root, os.O_RDONLY)
        try:
            os.fsync(fd)  # the rename itself
        finally:
            os.close(fd)

    def load_manifest(self, slot: str) -> Manifest | None:
        """The saved manifest, None if there is none or it no longer verifies."""
        try:
            m = decode_manifest((self.root / f"{slot}.manifest").read_bytes())
        except (OSError, ProtocolError):
            return None
        return m if m.signature_ok() else None

    def drop_manifest(self, slot: str) -> None:
        (self.root / f"{slot}.manifest").unlink(missing_ok=True)

    def prune(self, keep: list[Manifest]) -> int:
        """Delete chunks no manifest in ``keep`` lists, and take no more of them until the next
        prune; returns how many were deleted."""
        wanted = self.wanted = {h.hex() for m in keep for h in m.chunk_hashes}
        n = 0
        for p in (self.root / "chunks").iterdir():
            if ".tmp" in p.name:
                continue  # a chunk being written right now (another thread renames it next)
            if p.name not in wanted:
                p.unlink(missing_ok=True)
                n += 1
        return n
