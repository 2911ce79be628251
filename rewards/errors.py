"""Errors of the ``rewards`` package: bad task ids, unknown families, bad reward settings.

Everything here derives from ``TaskError`` (itself a ``SwarmError``, both in protocol/errors.py with
``InvalidTaskId``, since task ids are wire data), so a node can reject a
peer's malformed task id with one ``except TaskError`` while generator bugs still propagate.
"""

from __future__ import annotations

from collections.abc import Iterable

from swarm_node.protocol.errors import InvalidTaskId, TaskError  # the roots live with TaskId, in protocol

__all__ = ["TaskError", "UnknownTaskFamily", "InvalidTaskId", "InvalidRewardConfig"]


class UnknownTaskFamily(TaskError):
    """A task id names a family this node does not know."""

    def __init__(self, family: object, known: Iterable[str]) -> None:
        self.family = family
        self.known = tuple(known)
        super().__init__(
            f"unknown task family {family!r}; known families: {', '.join(self.known)}"
        )


class InvalidRewardConfig(TaskError):
    """A ``RewardConfig`` field has an invalid value."""
