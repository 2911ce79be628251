"""TaskId: the wire name of a task, ``family:seed:difficulty``.

It lives in ``protocol`` because rollouts carry it on the wire and the codec checks its syntax; the
families that turn an id into a question and a ground truth live in ``rewards``
(``rewards.registry.make_task``), which imports this module and the error root, nothing else of
``protocol``.
"""

from __future__ import annotations

import hashlib
import random
import re
from dataclasses import dataclass

from swarm_node.protocol.errors import InvalidTaskId

__all__ = ["MAX_SEED", "TaskId"]

# Seeds are unsigned 63-bit so they fit a signed int64 on the wire and in numpy.
MAX_SEED = 2**63 - 1

_FAMILY_RE = re.compile(r"[a-z][a-z0-9_]{0,31}")
# Canonical decimal only (no sign, no leading zeros, ASCII digits): one string per id.
_UINT_RE = re.compile(r"0|[1-9][0-9]{0,18}")
_MAX_SHOWN = 80  # truncate hostile input in error messages


def _shown(value: str) -> str:
    return repr(value if len(value) <= _MAX_SHOWN else value[:_MAX_SHOWN] + "...")


@dataclass(frozen=True)
class TaskId:
    """Identifies a task: ``family`` name, ``seed`` in [0, 2**63), ``difficulty`` >= 1.

    Only structure is checked here; whether the family exists and the difficulty is within its
    range is checked by ``registry.make_task``, which knows the families.
    """

    family: str
    seed: int
    difficulty: int

    def __post_init__(self) -> None:
        if not isinstance(self.family, str) or not _FAMILY_RE.fullmatch(self.family):
            raise InvalidTaskId(
                f"invalid task family name {self.family!r}: expected lowercase letters, digits"
                " or '_', starting with a letter, at most 32 characters"
            )
        # bool is an int subclass; True as a seed is a caller bug, not seed 1.
        if type(self.seed) is not int or not 0 <= self.seed <= MAX_SEED:
            raise InvalidTaskId(f"invalid task seed {self.seed!r}: must be an int in [0, 2**63)")
        if type(self.difficulty) is not int or self.difficulty < 1:
            raise InvalidTaskId(
                f"invalid task difficulty {self.difficulty!r}: must be an int >= 1"
                " (each family accepts 1..its max_difficulty)"
            )

    def __str__(self) -> str:
        return f"{self.family}:{self.seed}:{self.difficulty}"

    @classmethod
    def parse(cls, text: str) -> TaskId:
        """Parse ``"family:seed:difficulty"`` (the exact form ``str()`` produces)."""
        if not isinstance(text, str):
            raise InvalidTaskId(f"task id must be a str, got {type(text).__name__}")
        parts = text.split(":")
        if len(parts) != 3:
            raise InvalidTaskId(
                f"malformed task id {_shown(text)}: expected 'family:seed:difficulty'"
                f" (3 fields separated by ':'), got {len(parts)} field(s)"
            )
        family, seed, difficulty = parts
        if not _UINT_RE.fullmatch(seed):
            raise InvalidTaskId(
                f"malformed task id {_shown(text)}: seed {_shown(seed)} is not a decimal"
                " integer in [0, 2**63) (no sign, no leading zeros)"
            )
        if not _UINT_RE.fullmatch(difficulty):
            raise InvalidTaskId(
                f"malformed task id {_shown(text)}: difficulty {_shown(difficulty)} is not a"
                " positive decimal integer"
            )
        return cls(family, int(seed), int(difficulty))

    def rng(self) -> random.Random:
        """The generator a family draws this task from; identical on every node and Python.

        The seed comes from SHA-256 of the canonical id, never ``hash()`` (salted per process).
        """
        digest = hashlib.sha256(str(self).encode("ascii")).digest()
        return random.Random(int.from_bytes(digest[:8], "big"))
