"""The signed weight manifest: what it covers, what decoding refuses, which ones a follower takes."""

from __future__ import annotations

import hashlib

import msgpack
import pytest

from swarm_node.protocol.errors import MalformedMessage, MessageTooLarge
from swarm_node.protocol.identity import Identity
from swarm_node.protocol.manifest import (MAX_MANIFEST_BYTES, Manifest, ManifestCheck, build_manifest, decode_manifest,
                               encode_manifest)

SRC = Identity.generate()


def make(data=b"w" * 2500, version=3, identity=SRC, **kw) -> Manifest:
    args = dict(swarm="s", version=version, step=30, model_fingerprint="mf", tokenizer_fingerprint="tf",
                format="safetensors-full", chunk_size=1000, relays=["sn1b", "sn1a"])
    return build_manifest(data, identity, **{**args, **kw})


def test_chunks_sizes_and_hashes_are_those_of_the_bytes():
    data = bytes(range(256)) * 10
    m = make(data)
    assert m.chunk_sizes == (1000, 1000, 560) and m.total_size == 2560
    assert m.chunk_hashes[2] == hashlib.sha256(data[2000:]).digest()
    assert m.total_sha256 == hashlib.sha256(data).digest()
    assert m.chunk_ok(1, data[1000:2000]) and not m.chunk_ok(1, data[1000:1999] + b"x")
    assert not m.chunk_ok(3, b"") and not m.chunk_ok(0, data[1000:2000])
    assert m.relays == ("sn1b", "sn1a") and m.signature_ok()


def test_round_trip_and_the_signature_covers_every_field():
    m = make()
    again = decode_manifest(encode_manifest(m))
    assert again == m and again.signature_ok() and again.digest == m.digest
    fields = {k: getattr(m, k) for k in Manifest.__dataclass_fields__}
    for change in ({"version": 4}, {"step": 31}, {"relays": ("sn1a",)}, {"fanout": 2},
                   {"model_fingerprint": "other"}, {"chunk_hashes": (b"\0" * 32,) + m.chunk_hashes[1:]}):
        assert not Manifest(**{**fields, **change}).signature_ok(), change


@pytest.mark.parametrize("bad, field", [
    (b"\xc1", "<manifest>"),
    (msgpack.packb([1, 2]), "<manifest>"),
    (msgpack.packb({"v": 2, "m": [], "sig": b""}), "v"),
    (msgpack.packb({"v": 1, "m": [1, 2], "sig": b""}), "m"),
])
def test_malformed_bytes_are_refused_with_the_field(bad, field):
    with pytest.raises(MalformedMessage) as e:
        decode_manifest(bad)
    assert e.value.field == field


def test_claims_that_do_not_add_up_are_refused():
    m = make()
    raw = msgpack.unpackb(encode_manifest(m))
    for i, value, field in ((12, 9999, "total_size"), (10, [1000, 999, 500], "chunk_sizes[1]"),
                            (1, Identity.generate().peer_id, "source"), (14, 0, "fanout"),
                            (13, ["sn1a", "sn1a"], "relays"), (8, 0, "chunk_size")):
        bad = dict(raw, m=list(raw["m"]))
        bad["m"][i] = value
        with pytest.raises(MalformedMessage) as e:
            decode_manifest(msgpack.packb(bad))
        assert e.value.field == field, (i, e.value)
    with pytest.raises(MessageTooLarge):
        decode_manifest(b"\0" * (MAX_MANIFEST_BYTES + 1))


def test_a_follower_takes_only_newer_manifests_its_source_signed():
    check = ManifestCheck("s", SRC.peer_id)
    other = Identity.generate()
    m3 = make(version=3)
    fields = {k: getattr(m3, k) for k in Manifest.__dataclass_fields__}
    forged = Manifest(**{**fields, "version": 9})  # the source's signature over version 3
    resigned = Manifest(**{**fields, "version": 9, "signature": other.sign(Manifest(**{**fields, "version": 9}).signed_bytes())})
    assert not check.accept(forged) and not check.accept(resigned)
    assert not check.accept(make(version=9, identity=other))  # well signed, by someone else
    assert not check.accept(make(version=9, swarm="elsewhere"))
    assert check.accept(m3) and check.newest == 3
    assert not check.accept(m3)  # the same again
    assert not check.accept(make(version=2))  # an old one replayed
    assert check.accept(make(version=4))
    assert check.refused == {"bad_signature": 2, "not_followed_source": 1, "wrong_swarm": 1, "old_version": 2}
