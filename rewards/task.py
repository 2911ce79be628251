"""Task identity and content: ``TaskId`` (what peers exchange) and ``Task`` (what a model sees).

A task is fully determined by ``family:seed:difficulty``; every node regenerates the same
question and ground truth from the id alone (see ``registry.make_task``). This module also
holds the limits every family must respect, because the policy is a tiny model with a small
BPE vocabulary: short questions, short answers, a small character set.
"""

from __future__ import annotations

import hashlib
import random
import re
from dataclasses import dataclass

from rewards.errors import InvalidTaskId

__all__ = [
    "ALPHABET",
    "MAX_ANSWER_CHARS",
    "MAX_QUESTION_CHARS",
    "MAX_SEED",
    "PROMPT_TEMPLATE",
    "Task",
    "TaskId",
]

# The one place the prompt format is defined; the warm-start corpus and the trainer both use it.
PROMPT_TEMPLATE = "Q: {question}\nA: "

MAX_QUESTION_CHARS = 40
MAX_ANSWER_CHARS = 16
# Every character a question or answer may contain. Kept tiny so a locally trained BPE
# tokenizer covers it completely; ',' is reserved (no family emits it yet).
ALPHABET = frozenset("0123456789abcdefghijklmnopqrstuvwxyz +-*=(),")

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


@dataclass(frozen=True)
class Task:
    """A generated task: its id, the question text and the canonical ground-truth answer."""

    id: TaskId
    question: str
    answer: str

    @property
    def prompt(self) -> str:
        """The text fed to the model: ``PROMPT_TEMPLATE`` filled with the question."""
        return PROMPT_TEMPLATE.format(question=self.question)
