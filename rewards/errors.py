"""Errors of the ``rewards`` package: bad task ids, unknown families, bad reward settings.

Everything here derives from ``TaskError`` (itself a ``SwarmError``), so a node can reject a
peer's malformed task id with one ``except TaskError`` while generator bugs still propagate.
"""

from __future__ import annotations

from collections.abc import Iterable

from protocol.errors import SwarmError

__all__ = ["TaskError", "UnknownTaskFamily", "InvalidTaskId", "InvalidRewardConfig"]


class TaskError(SwarmError):
    """Root of every deliberate error of the ``rewards`` package (also: bad sampling requests)."""


class UnknownTaskFamily(TaskError):
    """A task id names a family this node does not know."""

    def __init__(self, family: object, known: Iterable[str]) -> None:
        self.family = family
        self.known = tuple(known)
        super().__init__(
            f"unknown task family {family!r}; known families: {', '.join(self.known)}"
        )


class InvalidTaskId(TaskError):
    """A task id (or one of its fields) is malformed or out of range."""


class InvalidRewardConfig(TaskError):
    """A ``RewardConfig`` field has an invalid value."""
