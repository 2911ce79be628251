"""The chunk store's bound: once pruned to the versions a follower keeps, an abandoned version's
chunks are gone and stay gone, even one whose write was under way when the prune came."""

from __future__ import annotations

import hashlib
import os
from types import SimpleNamespace

from swarm_node.node.broadcast.store import ChunkStore


def _chunk(text: bytes) -> tuple[bytes, bytes]:
    return hashlib.sha256(text).digest(), text


def _version(*chunks) -> SimpleNamespace:
    return SimpleNamespace(chunk_hashes=[h for h, _ in chunks])  # what prune reads of a manifest


def test_a_pruned_versions_chunks_are_deleted_and_not_written_again(tmp_path):
    store = ChunkStore(tmp_path)
    a, b = _chunk(b"of the abandoned version"), _chunk(b"of the version kept")
    store.put(*a)
    store.put(*b)
    assert store.prune([_version(b)]) == 1 and store.get(a[0]) is None and store.get(b[0]) == b[1]
    store.put(*a)  # a late write for the abandoned version
    assert os.listdir(tmp_path / "chunks") == [b[0].hex()]


def test_a_chunk_landing_after_its_version_was_pruned_is_deleted(tmp_path, monkeypatch):
    store = ChunkStore(tmp_path)
    a, b = _chunk(b"of the abandoned version"), _chunk(b"of the version kept")
    store.prune([_version(a, b)])  # both wanted when the write of a starts
    store.put(*b)
    rename = os.replace

    def pruned_meanwhile(src, dst):
        store.prune([_version(b)])  # the version of a is abandoned while a is being written
        rename(src, dst)

    monkeypatch.setattr(os, "replace", pruned_meanwhile)
    store.put(*a)
    monkeypatch.undo()
    assert os.listdir(tmp_path / "chunks") == [b[0].hex()]  # no chunk of a, no temporary file


def test_a_store_never_pruned_keeps_every_chunk(tmp_path):
    store = ChunkStore(tmp_path)
    chunks = [_chunk(bytes([i]) * 10) for i in range(3)]
    for c in chunks:
        store.put(*c)
    assert all(store.get(h) == data for h, data in chunks)
