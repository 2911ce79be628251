"""Bytes <-> messages: the canonical msgpack encoding every node sends and strictly decodes.

Canonical form is ``{"v": SCHEMA_VERSION, "kind": ..., "body": {...}}`` with body fields in
dataclass order and floats always float64, so ``encode`` is deterministic (signatures are taken
over these bytes). ``decode`` treats input as hostile: size is checked before unpacking, msgpack
itself is capped so it cannot allocate huge objects, and every rejection is a ``ProtocolError``
subclass naming the field and the reason. No pickle, no ext types, no bin fields.
"""

from __future__ import annotations

from dataclasses import fields
from typing import Any

import msgpack

from swarm_node.protocol.errors import MalformedMessage, MessageTooLarge, UnknownField, UnsupportedVersion
from swarm_node.protocol.messages import (
    MAX_ADDR_CHARS,
    MAX_ADDRS,
    MAX_COMPLETION_CHARS,
    MAX_COMPLETION_TOKENS,
    MAX_MESSAGE_BYTES,
    MAX_ROLLOUTS,
    SCHEMA_VERSION,
    Announcement,
    Message,
    RolloutBatch,
    RolloutRecord,
)

__all__ = ["decode", "encode"]

_KINDS: dict[str, type[RolloutBatch] | type[Announcement]] = {
    RolloutBatch.kind: RolloutBatch,
    Announcement.kind: Announcement,
}
_ENVELOPE_KEYS = ("v", "kind", "body")
_WHOLE = "<message>"

# msgpack's own caps (bytes / items), derived from our limits: a string may be 4 UTF-8 bytes
# per character; the largest array is a completion; the largest map is a message body.
_MAX_STR_BYTES = 4 * max(MAX_COMPLETION_CHARS, MAX_ADDR_CHARS)
_MAX_ARRAY_LEN = max(MAX_COMPLETION_TOKENS, MAX_ROLLOUTS, MAX_ADDRS)
_MAX_MAP_LEN = max(len(fields(c)) for c in (RolloutRecord, RolloutBatch, Announcement))


def _pack_value(value: Any) -> Any:
    if isinstance(value, RolloutRecord):
        return _pack_fields(value)
    if isinstance(value, tuple):
        return [_pack_value(v) for v in value]
    return value


def _pack_fields(obj: RolloutRecord | RolloutBatch | Announcement) -> dict[str, Any]:
    # dicts keep insertion order and msgpack writes them in that order: fixed field order.
    return {f.name: _pack_value(getattr(obj, f.name)) for f in fields(obj)}


def encode(msg: Message) -> bytes:
    """The canonical bytes of ``msg``; raises ``MessageTooLarge`` if peers would reject it."""
    if type(msg) not in _KINDS.values():
        raise TypeError(f"cannot encode {type(msg).__name__}: not a wire message")
    envelope = {"v": SCHEMA_VERSION, "kind": msg.kind, "body": _pack_fields(msg)}
    data = msgpack.packb(envelope, use_bin_type=True, use_single_float=False)
    if len(data) > MAX_MESSAGE_BYTES:
        raise MessageTooLarge(len(data), MAX_MESSAGE_BYTES)
    return data


def _pairs_to_dict(pairs: list[tuple[Any, Any]]) -> dict[Any, Any]:
    # msgpack keeps the last of duplicate keys silently; two readings of one message would let
    # a signed message mean different things to different decoders.
    out: dict[Any, Any] = {}
    for key, value in pairs:
        if key in out:
            raise MalformedMessage(str(key)[:80], "duplicate map key")
        out[key] = value
    return out


def _unpack(data: bytes) -> Any:
    unpacker = msgpack.Unpacker(
        None,
        raw=False,
        strict_map_key=True,
        use_list=True,
        object_pairs_hook=_pairs_to_dict,
        max_buffer_size=MAX_MESSAGE_BYTES,
        max_str_len=_MAX_STR_BYTES,
        max_bin_len=0,  # we never send bytes fields
        max_ext_len=0,  # nor ext types (timestamps, custom objects)
        max_array_len=_MAX_ARRAY_LEN,
        max_map_len=_MAX_MAP_LEN,
    )
    try:
        unpacker.feed(data)
        obj = unpacker.unpack()
    except msgpack.OutOfData as e:
        raise MalformedMessage(_WHOLE, "truncated msgpack data") from e
    # ValueError covers msgpack's FormatError, StackError, limit violations, non-str map keys
    # and invalid UTF-8 (UnicodeDecodeError).
    except (ValueError, msgpack.BufferFull) as e:
        raise MalformedMessage(_WHOLE, f"not valid msgpack: {str(e)[:200]}") from e
    if unpacker.tell() != len(data):
        raise MalformedMessage(_WHOLE, f"{len(data) - unpacker.tell()} trailing bytes")
    return obj


def _check_keys(obj: object, what: str, prefix: str, expected: tuple[str, ...]) -> dict[str, Any]:
    """``obj`` must be a map with exactly the ``expected`` keys; ``what`` names it if not."""
    if type(obj) is not dict:
        raise MalformedMessage(what, f"expected a map, got {type(obj).__name__}")
    for key in obj:
        if key not in expected:
            raise UnknownField(f"{prefix}{key[:80]!s}")
    for key in expected:
        if key not in obj:
            raise MalformedMessage(f"{prefix}{key}", "missing field")
    return obj


def _tuples(value: Any) -> Any:
    """msgpack gives lists; our dataclasses hold tuples (anything else is left to fail)."""
    return tuple(value) if type(value) is list else value


def _build(cls: type, body: dict[str, Any]) -> Any:
    return cls(**{name: _tuples(value) for name, value in body.items()})


def _decode_record(obj: object, where: str) -> RolloutRecord:
    body = _check_keys(obj, where, f"{where}.", tuple(f.name for f in fields(RolloutRecord)))
    try:
        return _build(RolloutRecord, body)
    except MalformedMessage as e:
        raise type(e)(f"{where}.{e.field}", e.reason) from e


def decode(data: bytes) -> Message:
    """Parse and validate one message; any rejection raises a ``ProtocolError`` subclass."""
    if not isinstance(data, (bytes, bytearray)):
        raise TypeError(f"decode expects bytes, got {type(data).__name__}")
    size = len(data)
    if size > MAX_MESSAGE_BYTES:
        raise MessageTooLarge(size, MAX_MESSAGE_BYTES)
    obj = _unpack(bytes(data))
    if type(obj) is not dict:
        raise MalformedMessage(_WHOLE, f"expected a map, got {type(obj).__name__}")
    # The version decides how to read the rest, so it is checked before the envelope's shape.
    if "v" not in obj:
        raise MalformedMessage("v", "missing field")
    version = obj["v"]
    if type(version) is not int:
        raise MalformedMessage("v", f"expected int, got {type(version).__name__}")
    if version != SCHEMA_VERSION:
        raise UnsupportedVersion(version, SCHEMA_VERSION)
    _check_keys(obj, _WHOLE, "", _ENVELOPE_KEYS)
    kind = obj["kind"]
    if type(kind) is not str:
        raise MalformedMessage("kind", f"expected str, got {type(kind).__name__}")
    if kind not in _KINDS:
        raise MalformedMessage("kind", f"unknown kind {kind[:80]!r}; known: {', '.join(_KINDS)}")
    cls = _KINDS[kind]
    # Body fields are named bare ("round", "rollouts[3].task_id"), as the dataclasses name them.
    body = _check_keys(obj["body"], "body", "", tuple(f.name for f in fields(cls)))
    if cls is RolloutBatch and type(body["rollouts"]) is list:
        body = dict(body)
        body["rollouts"] = [
            _decode_record(r, f"rollouts[{i}]") for i, r in enumerate(body["rollouts"])
        ]
    return _build(cls, body)
