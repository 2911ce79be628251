"""Versioned wire messages that nodes exchange: rollout batches and heartbeat announcements.

These are the values ``protocol.codec`` turns into bytes and back. Every message validates
itself on construction (types and per-field limits), so a decoded peer message and a locally
built one obey the same rules; a violation raises ``MalformedMessage`` naming the field.

A rollout carries no reward and no ground truth: the receiver regenerates the task from its id
and recomputes the reward itself, so a peer cannot claim a reward it did not earn.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import ClassVar

from swarm_node.protocol.errors import InvalidTaskId, MalformedMessage
from swarm_node.protocol.task_id import TaskId

__all__ = [
    "MAX_ADDR_CHARS",
    "MAX_ADDRS",
    "MAX_COMPLETION_CHARS",
    "MAX_COMPLETION_TOKENS",
    "MAX_FINGERPRINT_CHARS",
    "MAX_MESSAGE_BYTES",
    "MAX_ROLLOUTS",
    "MAX_SENDER_CHARS",
    "MAX_TASK_ID_CHARS",
    "MAX_TOKEN_ID",
    "MAX_UINT",
    "SCHEMA_VERSION",
    "same_tokenizer",
    "Announcement",
    "Message",
    "RolloutBatch",
    "RolloutRecord",
]

SCHEMA_VERSION = 1

# hivemind's cap on a persistent p2p message; anything bigger is rejected before unpacking.
MAX_MESSAGE_BYTES = 4 * 1024 * 1024
MAX_ROLLOUTS = 512
MAX_COMPLETION_TOKENS = 1024
# The lowest per-token behaviour log-prob a receiver admits. No sampler draws a token of
# probability e^-100 (float32 softmax bottoms out near e^-103); a lower claim is a lie that, left
# in, overflows the learner's float32 sums (-1e300 is -inf there). Receivers check it
# (node/swarm/exchange.py, implausible_logprob); the codec accepts any finite value <= 0.
MIN_TOKEN_LOGPROB = -100.0
# Generous for 1024 tokens of a tiny BPE vocabulary, yet bounded so text cannot dwarf the ids.
MAX_COMPLETION_CHARS = 8192
MAX_TOKEN_ID = 2**31 - 1
MAX_SENDER_CHARS = 128
MAX_FINGERPRINT_CHARS = 64
MAX_ADDRS = 16
MAX_ADDR_CHARS = 256
# family (32) + two 19-digit numbers + 2 separators, rounded up; parse() checks the rest.
MAX_TASK_ID_CHARS = 80
# Counters fit a signed int64 so every msgpack implementation and numpy can hold them.
MAX_UINT = 2**63 - 1


def _check_str(value: object, field: str, max_chars: int, *, allow_empty: bool = False) -> None:
    if type(value) is not str:
        raise MalformedMessage(field, f"expected str, got {type(value).__name__}")
    if not allow_empty and not value:
        raise MalformedMessage(field, "must not be empty")
    if len(value) > max_chars:
        raise MalformedMessage(field, f"{len(value)} characters, over the limit of {max_chars}")
    # Lone surrogates are valid Python str but not UTF-8, so msgpack could not send them.
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as e:
        raise MalformedMessage(field, "not encodable as UTF-8") from e


def _check_uint(value: object, field: str, max_value: int = MAX_UINT) -> None:
    # bool is an int subclass; True as a round number is a bug, not round 1.
    if type(value) is not int:
        raise MalformedMessage(field, f"expected int, got {type(value).__name__}")
    if not 0 <= value <= max_value:
        raise MalformedMessage(field, f"{value} is out of range [0, {max_value}]")


def _as_float(value: object, field: str) -> float:
    """Accept int or float (not bool), return a finite float."""
    if type(value) not in (int, float):
        raise MalformedMessage(field, f"expected float, got {type(value).__name__}")
    try:
        result = float(value)  # type: ignore[arg-type]
    except OverflowError as e:  # an int beyond float range
        raise MalformedMessage(field, "number out of float range") from e
    if not math.isfinite(result):
        raise MalformedMessage(field, f"must be finite, got {result}")
    return result


def _check_tuple(value: object, field: str, min_len: int, max_len: int) -> tuple:
    if type(value) is not tuple:
        raise MalformedMessage(field, f"expected tuple, got {type(value).__name__}")
    if not min_len <= len(value) <= max_len:
        raise MalformedMessage(field, f"has {len(value)} items, expected {min_len}..{max_len}")
    return value


@dataclass(frozen=True)
class RolloutRecord:
    """One sampled completion of one task, with the sampler's per-token log-probs.

    ``behaviour_logprobs[i]`` is log pi_behaviour(completion_ids[i]); the learner needs it for
    off-policy correction. No reward field on purpose: receivers recompute it.
    """

    task_id: str
    completion_ids: tuple[int, ...]
    completion_text: str
    behaviour_logprobs: tuple[float, ...]
    truncated: bool

    def __post_init__(self) -> None:
        _check_str(self.task_id, "task_id", MAX_TASK_ID_CHARS)
        try:
            TaskId.parse(self.task_id)
        except InvalidTaskId as e:
            raise MalformedMessage("task_id", str(e)) from e
        ids = _check_tuple(self.completion_ids, "completion_ids", 0, MAX_COMPLETION_TOKENS)
        for i, token in enumerate(ids):
            _check_uint(token, f"completion_ids[{i}]", MAX_TOKEN_ID)
        _check_str(self.completion_text, "completion_text", MAX_COMPLETION_CHARS, allow_empty=True)
        lps = _check_tuple(self.behaviour_logprobs, "behaviour_logprobs", 0, MAX_COMPLETION_TOKENS)
        if len(lps) != len(ids):
            raise MalformedMessage(
                "behaviour_logprobs",
                f"has {len(lps)} items but completion_ids has {len(ids)}; they must match",
            )
        normalized = []
        for i, lp in enumerate(lps):
            lp = _as_float(lp, f"behaviour_logprobs[{i}]")
            if lp > 0.0:
                raise MalformedMessage(f"behaviour_logprobs[{i}]", f"log-prob {lp} is > 0")
            normalized.append(lp)
        # Ints become floats here so equal messages encode to identical bytes.
        object.__setattr__(self, "behaviour_logprobs", tuple(normalized))
        if type(self.truncated) is not bool:
            raise MalformedMessage("truncated", f"expected bool, got {type(self.truncated).__name__}")


def _check_header(msg: "_Header") -> None:
    """Fields shared by every message: who sent it, when, and for which model."""
    _check_str(msg.sender, "sender", MAX_SENDER_CHARS)
    _check_uint(msg.round, "round")
    _check_uint(msg.policy_version, "policy_version")
    _check_str(msg.model_fingerprint, "model_fingerprint", MAX_FINGERPRINT_CHARS)
    _check_str(msg.tokenizer_fingerprint, "tokenizer_fingerprint", MAX_FINGERPRINT_CHARS)
    object.__setattr__(msg, "created_at", _as_float(msg.created_at, "created_at"))


@dataclass(frozen=True)
class _Header:
    """Fields every message starts with: who sent it, when, and for which model (checked here)."""

    sender: str
    round: int
    policy_version: int
    model_fingerprint: str
    tokenizer_fingerprint: str
    created_at: float

    def __post_init__(self) -> None:
        _check_header(self)


@dataclass(frozen=True)
class RolloutBatch(_Header):
    """Rollouts a peer sampled in one round with one policy version (1..MAX_ROLLOUTS of them)."""

    kind: ClassVar[str] = "rollouts"

    rollouts: tuple[RolloutRecord, ...]

    def __post_init__(self) -> None:
        super().__post_init__()
        rollouts = _check_tuple(self.rollouts, "rollouts", 1, MAX_ROLLOUTS)
        for i, record in enumerate(rollouts):
            if type(record) is not RolloutRecord:
                raise MalformedMessage(
                    f"rollouts[{i}]", f"expected RolloutRecord, got {type(record).__name__}"
                )


@dataclass(frozen=True)
class Announcement(_Header):
    """Heartbeat: a peer is alive, at this round and policy version, reachable at ``addrs``."""

    kind: ClassVar[str] = "announce"

    addrs: tuple[str, ...]

    def __post_init__(self) -> None:
        super().__post_init__()
        addrs = _check_tuple(self.addrs, "addrs", 0, MAX_ADDRS)
        for i, addr in enumerate(addrs):
            _check_str(addr, f"addrs[{i}]", MAX_ADDR_CHARS)


Message = RolloutBatch | Announcement


def same_tokenizer(theirs: str, mine: str) -> bool:
    """Whether token ids made under tokenizer fingerprint ``theirs`` mean the same to a node whose
    fingerprint is ``mine`` (policies/policy.py ``tokenizer_fingerprint``): equal fingerprints, and
    only then, let token ids and token-level log-probs transfer. The one rule for a peer's rollouts
    (node/swarm/admission.py) and a followed weight version (node/broadcast/follow.py)."""
    return theirs == mine
