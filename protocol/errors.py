"""Root of every error swarm-node raises on purpose.

It lives in ``protocol`` because that is the lowest layer: ``rewards``, ``policies`` and ``node``
may all import it, and it imports nothing. Each package keeps its own ``errors.py`` with a
subtree rooted here, so a caller can catch ``SwarmError`` for "bad input or environment" while
bugs (``TypeError``, ``AttributeError``...) still propagate.
"""

__all__ = [
    "IdentityError",
    "InvalidTaskId",
    "SigningError",
    "MalformedMessage",
    "MessageTooLarge",
    "UnknownField",
    "ProtocolError",
    "SwarmError",
    "TaskError",
    "UnsupportedVersion",
]


class SwarmError(Exception):
    """Base class of every deliberate swarm-node error (bad input, config, checkpoint, ...)."""


class IdentityError(SwarmError):
    """The node's key file cannot be created, read, trusted or parsed."""


class SigningError(SwarmError):
    """An envelope cannot be signed (local input out of range: seq, payload size, ...)."""


class ProtocolError(SwarmError):
    """A peer's wire message was rejected; the subclass name says why (nodes count by it)."""


class MalformedMessage(ProtocolError):
    """Not msgpack, wrong shape, or a field with a wrong type or out-of-range value.

    ``field`` is the path of the offending field (``"rollouts[3].task_id"``, ``"<message>"`` when
    the bytes themselves are bad) and ``reason`` says what is wrong with it.
    """

    def __init__(self, field: str, reason: str) -> None:
        self.field = field
        self.reason = reason
        super().__init__(f"malformed message: field {field!r}: {reason}")


class UnknownField(MalformedMessage):
    """A field the schema does not have, e.g. a ``reward`` or ``ground_truth`` claim that a
    receiver must never trust: the protocol has no such fields, so such messages are rejected."""

    def __init__(self, field: str, reason: str = "unknown field") -> None:
        super().__init__(field, reason)


class MessageTooLarge(ProtocolError):
    """A message exceeds the byte limit; raised before any of it is unpacked."""

    def __init__(self, size: int, limit: int) -> None:
        self.size = size
        self.limit = limit
        super().__init__(f"message is {size} bytes, over the {limit}-byte limit")


class UnsupportedVersion(ProtocolError):
    """A message declares a schema version this node cannot read."""

    def __init__(self, version: int, supported: int) -> None:
        self.version = version
        self.supported = supported
        super().__init__(
            f"unsupported schema version {version} (field 'v'); this node supports version"
            f" {supported}"
        )


class TaskError(SwarmError):
    """Root of every deliberate task error: bad task ids here, unknown families and bad reward
    settings in ``rewards.errors`` (also: bad sampling requests). A node rejects a peer's bad
    task id with one ``except TaskError`` while generator bugs still propagate."""


class InvalidTaskId(TaskError):
    """A task id (or one of its fields) is malformed or out of range."""
