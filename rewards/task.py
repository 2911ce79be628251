"""Task content: ``Task`` (what a model sees) for a ``TaskId`` (what peers exchange, protocol/task_id.py).

A task is fully determined by ``family:seed:difficulty``; every node regenerates the same
question and ground truth from the id alone (see ``registry.make_task``). This module also
holds the limits every family must respect, because the policy is a tiny model with a small
BPE vocabulary: short questions, short answers, a small character set.
"""

from __future__ import annotations

from dataclasses import dataclass

from swarm_node.protocol.task_id import MAX_SEED, TaskId  # re-exported: the rewards API names it

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
