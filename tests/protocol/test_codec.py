"""Wire codec: exact deterministic round trips, and strict rejection of hostile input.

Every rejection must be a ``ProtocolError`` subclass whose message names the offending field;
a fuzz loop checks that no other exception escapes ``decode``.
"""

from __future__ import annotations

import math
import random

import msgpack
import pytest

from swarm_node.protocol.codec import decode, encode
from swarm_node.protocol.errors import (
    MalformedMessage,
    MessageTooLarge,
    ProtocolError,
    SwarmError,
    UnsupportedVersion,
)
from swarm_node.protocol.messages import (
    MAX_COMPLETION_TOKENS,
    MAX_MESSAGE_BYTES,
    MAX_ROLLOUTS,
    SCHEMA_VERSION,
    Announcement,
    RolloutBatch,
    RolloutRecord,
)


def _record(**kw) -> RolloutRecord:
    base = dict(
        task_id="arithmetic:42:3",
        completion_ids=(5, 17, 0, 2**31 - 1),
        completion_text="<answer>19</answer>",
        behaviour_logprobs=(-0.125, -3.5e-7, 0.0, -12.75),
        truncated=False,
    )
    base.update(kw)
    return RolloutRecord(**base)


def _batch(**kw) -> RolloutBatch:
    base = dict(
        sender="12D3KooWpeer",
        round=7,
        policy_version=3,
        model_fingerprint="sha256:abc",
        tokenizer_fingerprint="sha256:def",
        created_at=1_700_000_000.123456,
        rollouts=(_record(), _record(task_id="lists:0:1", truncated=True)),
    )
    base.update(kw)
    return RolloutBatch(**base)


def _announce(**kw) -> Announcement:
    base = dict(
        sender="12D3KooWpeer",
        round=0,
        policy_version=0,
        model_fingerprint="m" * 64,
        tokenizer_fingerprint="t",
        created_at=0.1,
        addrs=("/ip4/127.0.0.1/tcp/4001", "/ip6/::1/udp/4001/quic-v1"),
    )
    base.update(kw)
    return Announcement(**base)


def _raw(msg) -> dict:
    """The envelope of a valid message as plain msgpack data, ready to be tampered with."""
    return msgpack.unpackb(encode(msg), raw=False)


def _pack(obj) -> bytes:
    return msgpack.packb(obj, use_bin_type=True)


def _reject(data: bytes, cls: type[ProtocolError], *words: str) -> ProtocolError:
    with pytest.raises(cls) as info:
        decode(data)
    for word in words:
        assert word in str(info.value), (word, str(info.value))
    return info.value


# --- round trips -------------------------------------------------------------------------------


@pytest.mark.parametrize("msg", [_batch(), _announce(), _announce(addrs=())], ids=["batch", "announce", "no-addrs"])
def test_round_trip_is_exact_and_deterministic(msg):
    data = encode(msg)
    back = decode(data)
    assert back == msg and type(back) is type(msg)
    assert encode(back) == data
    assert encode(msg) == data


def test_round_trip_keeps_float64_bits_and_tuples():
    lps = (-math.pi, -1e-300, -0.0, -1.7976931348623157e308)
    msg = _batch(created_at=1.1, rollouts=(_record(completion_ids=(1, 2, 3, 4), behaviour_logprobs=lps),))
    back = decode(encode(msg))
    assert back.rollouts[0].behaviour_logprobs == lps
    assert [math.copysign(1, x) for x in back.rollouts[0].behaviour_logprobs] == [math.copysign(1, x) for x in lps]
    assert back.created_at == 1.1
    assert type(back.rollouts) is tuple and type(back.rollouts[0].completion_ids) is tuple


def test_canonical_envelope_layout():
    raw = _raw(_announce())
    assert list(raw) == ["v", "kind", "body"]
    assert raw["v"] == SCHEMA_VERSION == 1 and raw["kind"] == "announce"
    assert list(raw["body"]) == ["sender", "round", "policy_version", "model_fingerprint",
                                 "tokenizer_fingerprint", "created_at", "addrs"]


def test_int_accepted_for_float_and_encodes_like_the_float():
    raw = _raw(_batch())
    raw["body"]["created_at"] = 5
    raw["body"]["rollouts"][0]["behaviour_logprobs"] = [-1, 0, -2, -3]
    msg = decode(_pack(raw))
    assert msg.created_at == 5.0 and type(msg.created_at) is float
    assert msg.rollouts[0].behaviour_logprobs == (-1.0, 0.0, -2.0, -3.0)
    assert encode(msg) == encode(_batch(created_at=5.0, rollouts=(
        _record(behaviour_logprobs=(-1.0, 0.0, -2.0, -3.0)), _batch().rollouts[1])))


def test_errors_form_a_hierarchy_under_swarm_error():
    for cls in (MalformedMessage, MessageTooLarge, UnsupportedVersion):
        assert issubclass(cls, ProtocolError) and issubclass(cls, SwarmError)


# --- rejections --------------------------------------------------------------------------------


def test_garbage_bytes():
    _reject(b"\xc1\xc1\xc1", MalformedMessage, "<message>")


def test_not_a_map():
    _reject(_pack([1, 2, 3]), MalformedMessage, "<message>", "expected a map")


def test_truncated_bytes():
    data = encode(_batch())
    for cut in (1, len(data) // 2, len(data) - 1):
        _reject(data[:cut], MalformedMessage, "truncated")
    _reject(b"", MalformedMessage, "truncated")


def test_trailing_bytes():
    _reject(encode(_announce()) + b"\x00", MalformedMessage, "trailing")


def test_oversized_message_rejected_before_unpacking(monkeypatch):
    def boom(*a, **k):
        raise AssertionError("unpacked an oversized message")

    monkeypatch.setattr(msgpack, "Unpacker", boom)
    err = _reject(b"\x00" * (5 * 1024 * 1024), MessageTooLarge, str(5 * 1024 * 1024), str(MAX_MESSAGE_BYTES))
    assert err.size == 5 * 1024 * 1024 and err.limit == MAX_MESSAGE_BYTES == 4 * 1024 * 1024


def test_encode_refuses_a_message_peers_would_reject():
    # 512 rollouts x 1024 tokens of float64 log-probs is far over 4 MiB.
    rec = _record(completion_ids=(2**31 - 1,) * MAX_COMPLETION_TOKENS,
                  behaviour_logprobs=(-0.1,) * MAX_COMPLETION_TOKENS)
    with pytest.raises(MessageTooLarge):
        encode(_batch(rollouts=(rec,) * MAX_ROLLOUTS))


def test_unsupported_version():
    raw = _raw(_announce())
    raw["v"] = 2
    err = _reject(_pack(raw), UnsupportedVersion, "2", "'v'", "supports version 1")
    assert err.version == 2 and err.supported == 1


@pytest.mark.parametrize("v", [True, "1", 1.0, None])
def test_version_of_wrong_type(v):
    raw = _raw(_announce())
    raw["v"] = v
    _reject(_pack(raw), MalformedMessage, "'v'", "expected int")


def test_unknown_kind():
    raw = _raw(_announce())
    raw["kind"] = "gradients"
    _reject(_pack(raw), MalformedMessage, "'kind'", "gradients")


def test_kind_body_mismatch_is_unknown_and_missing_field():
    raw = _raw(_announce())
    raw["kind"] = "rollouts"
    _reject(_pack(raw), MalformedMessage, "'addrs'", "unknown field")


def test_missing_field():
    raw = _raw(_batch())
    del raw["body"]["policy_version"]
    _reject(_pack(raw), MalformedMessage, "'policy_version'", "missing field")
    raw = _raw(_batch())
    del raw["body"]["rollouts"][1]["truncated"]
    _reject(_pack(raw), MalformedMessage, "'rollouts[1].truncated'", "missing field")
    raw = _raw(_batch())
    del raw["body"]
    _reject(_pack(raw), MalformedMessage, "'body'", "missing field")


def test_unknown_reward_field_in_rollout_record():
    raw = _raw(_batch())
    raw["body"]["rollouts"][0]["reward"] = 1.0
    _reject(_pack(raw), MalformedMessage, "'rollouts[0].reward'", "unknown field")


def test_unknown_envelope_field():
    raw = _raw(_announce())
    raw["sig"] = "x"
    _reject(_pack(raw), MalformedMessage, "'sig'", "unknown field")


def test_duplicate_map_keys():
    # Hand-built map {"v": 1, "v": 1, ...}: msgpack would silently keep the last one.
    data = b"\x84" + _pack("v") + _pack(1) + _pack("v") + _pack(1) + _pack("kind") + _pack("announce") \
        + _pack("body") + _pack(_raw(_announce())["body"])
    _reject(data, MalformedMessage, "'v'", "duplicate")


def test_bool_is_not_int():
    raw = _raw(_batch())
    raw["body"]["round"] = True
    _reject(_pack(raw), MalformedMessage, "'round'", "expected int, got bool")
    raw = _raw(_batch())
    raw["body"]["rollouts"][0]["completion_ids"][2] = False
    _reject(_pack(raw), MalformedMessage, "'rollouts[0].completion_ids[2]'", "bool")


def test_wrong_types():
    cases = [
        (("sender",), 5, "'sender'", "expected str"),
        (("created_at",), "now", "'created_at'", "expected float"),
        (("rollouts",), {"a": 1}, "'rollouts'", "expected tuple"),
        (("rollouts", 0), [1], "'rollouts[0]'", "expected a map"),
        (("rollouts", 0, "truncated"), 1, "'rollouts[0].truncated'", "expected bool"),
        (("rollouts", 0, "completion_text"), b"", "'rollouts[0].completion_text'", "expected str"),  # empty bin passes msgpack caps
    ]
    for path, value, *words in cases:
        raw = _raw(_batch())
        target = raw["body"]
        for step in path[:-1]:
            target = target[step]
        target[path[-1]] = value
        _reject(_pack(raw), MalformedMessage, *words)


def test_negative_round():
    raw = _raw(_batch())
    raw["body"]["round"] = -1
    _reject(_pack(raw), MalformedMessage, "'round'", "out of range")


def test_token_id_out_of_range():
    raw = _raw(_batch())
    raw["body"]["rollouts"][0]["completion_ids"][0] = 2**31
    _reject(_pack(raw), MalformedMessage, "'rollouts[0].completion_ids[0]'", "out of range")


@pytest.mark.parametrize("bad", [0.5, math.nan, math.inf, -math.inf])
def test_bad_logprob(bad):
    raw = _raw(_batch())
    raw["body"]["rollouts"][1]["behaviour_logprobs"][3] = bad
    _reject(_pack(raw), MalformedMessage, "'rollouts[1].behaviour_logprobs[3]'")


def test_non_finite_created_at():
    raw = _raw(_announce())
    raw["body"]["created_at"] = math.nan
    _reject(_pack(raw), MalformedMessage, "'created_at'", "finite")


def test_mismatched_lengths():
    raw = _raw(_batch())
    raw["body"]["rollouts"][0]["behaviour_logprobs"].pop()
    _reject(_pack(raw), MalformedMessage, "'rollouts[0].behaviour_logprobs'", "3 items", "has 4")


def test_too_many_rollouts():
    raw = _raw(_batch())
    raw["body"]["rollouts"] = raw["body"]["rollouts"][:1] * (MAX_ROLLOUTS + 1)
    _reject(_pack(raw), MalformedMessage, "'rollouts'", "513 items")


def test_empty_rollouts():
    raw = _raw(_batch())
    raw["body"]["rollouts"] = []
    _reject(_pack(raw), MalformedMessage, "'rollouts'", "0 items")


def test_completion_too_long():
    raw = _raw(_batch())
    rec = raw["body"]["rollouts"][0]
    rec["completion_ids"] = [1] * (MAX_COMPLETION_TOKENS + 1)
    rec["behaviour_logprobs"] = [-1.0] * (MAX_COMPLETION_TOKENS + 1)
    # msgpack's own array cap (1024) or our per-field check: either way a MalformedMessage.
    _reject(_pack(raw), MalformedMessage)
    with pytest.raises(MalformedMessage, match="completion_ids"):
        _record(completion_ids=(1,) * 1025, behaviour_logprobs=(-1.0,) * 1025)


def test_too_many_addrs_and_long_addr():
    raw = _raw(_announce())
    raw["body"]["addrs"] = ["/ip4/1.2.3.4/tcp/1"] * 17
    _reject(_pack(raw), MalformedMessage, "'addrs'", "17 items")
    raw = _raw(_announce())
    raw["body"]["addrs"][1] = "/" + "a" * 256
    _reject(_pack(raw), MalformedMessage, "'addrs[1]'", "257 characters")


def test_string_field_limits():
    for field, limit in (("sender", 128), ("model_fingerprint", 64), ("tokenizer_fingerprint", 64)):
        raw = _raw(_announce())
        raw["body"][field] = "x" * (limit + 1)
        _reject(_pack(raw), MalformedMessage, f"'{field}'", f"limit of {limit}")
        raw["body"][field] = ""
        _reject(_pack(raw), MalformedMessage, f"'{field}'", "empty")


def test_huge_string_field_stopped_by_msgpack_cap():
    raw = _raw(_announce())
    raw["body"]["sender"] = "x" * (1024 * 1024)  # 1 MiB: under the message cap, over any string cap
    _reject(_pack(raw), MalformedMessage, "<message>")


def test_invalid_task_id():
    for bad in ("arithmetic:1", "Arith:1:1", "arithmetic:01:1", "arithmetic:1:0", ""):
        raw = _raw(_batch())
        raw["body"]["rollouts"][1]["task_id"] = bad
        _reject(_pack(raw), MalformedMessage, "'rollouts[1].task_id'")


def test_non_str_map_keys():
    raw = _raw(_announce())
    raw["body"][7] = "x"
    _reject(_pack(raw), MalformedMessage, "<message>")
    raw = _raw(_announce())
    raw["body"][b"sender"] = "x"  # bin key, not a str
    _reject(_pack(raw), MalformedMessage)


def test_bin_and_ext_types_rejected():
    raw = _raw(_announce())
    raw["body"]["sender"] = b"\x01\x02"
    _reject(_pack(raw), MalformedMessage, "<message>")
    raw["body"]["sender"] = msgpack.ExtType(1, b"xyz")
    _reject(_pack(raw), MalformedMessage, "<message>")


def test_deep_nesting():
    data = b"\x91" * 100_000 + b"\x00"
    _reject(data, MalformedMessage, "<message>")


def test_local_construction_validates_too():
    with pytest.raises(MalformedMessage, match="'round'"):
        _batch(round=-3)
    with pytest.raises(MalformedMessage, match="'rollouts'"):
        _batch(rollouts=[_record()])  # a list, not a tuple: frozen messages hold tuples
    with pytest.raises(MalformedMessage, match="'sender'"):
        _announce(sender="\ud800")
    with pytest.raises(TypeError):
        encode({"v": 1})


# --- fuzz --------------------------------------------------------------------------------------


def test_fuzz_random_bytes_and_mutations_only_raise_protocol_errors():
    rng = random.Random(1234)
    valid = [encode(_batch()), encode(_announce())]
    accepted = 0
    for i in range(2000):
        if i % 2:
            data = bytes(rng.getrandbits(8) for _ in range(rng.randrange(0, 64)))
        else:
            buf = bytearray(rng.choice(valid))
            for _ in range(rng.randrange(1, 5)):
                op = rng.randrange(4)
                pos = rng.randrange(len(buf)) if buf else 0
                if op == 0 and buf:
                    buf[pos] = rng.getrandbits(8)
                elif op == 1 and buf:
                    buf[pos] ^= 1 << rng.randrange(8)
                elif op == 2:
                    buf[pos:pos] = bytes(rng.getrandbits(8) for _ in range(rng.randrange(1, 4)))
                elif buf:
                    del buf[pos:pos + rng.randrange(1, 4)]
            data = bytes(buf)
        try:
            msg = decode(data)
        except ProtocolError:
            continue
        accepted += 1
        assert encode(msg) == encode(decode(encode(msg)))  # whatever is accepted round-trips
    assert accepted < 2000
