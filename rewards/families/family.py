"""The ``Family`` record: what every task family module exposes to the registry.

A family is a pure generator ``(rng, difficulty) -> (question, answer)`` plus a normalizer
that maps a model's answer and the ground truth to one canonical form before comparison; a
family may instead score an answer itself (``scorer``: a task source's own scoring, which can give
partial credit, e.g. reasoning-gym's ``score_answer``, rewards/rg_source.py).
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass

from swarm_node.rewards.errors import InvalidTaskId

__all__ = ["Family", "Generator", "Normalizer"]

Generator = Callable[[random.Random, int], tuple[str, str]]
Normalizer = Callable[[str], str]
Scorer = Callable[[str, "Task"], float]  # (extracted answer, task) -> correctness in [0, 1]


@dataclass(frozen=True)
class Family:
    """One procedural task family with difficulty levels ``1..max_difficulty``."""

    name: str
    max_difficulty: int
    description: str
    generator: Generator
    normalizer: Normalizer
    scorer: Scorer | None = None  # when set, correctness is its score, not normalized equality

    def generate(self, rng: random.Random, difficulty: int) -> tuple[str, str]:
        """Draw ``(question, answer)`` at ``difficulty`` from ``rng``."""
        self.check_difficulty(difficulty)
        return self.generator(rng, difficulty)

    def normalize(self, answer: str) -> str:
        """Canonical form of ``answer`` for equality comparison with the ground truth."""
        return self.normalizer(answer)

    def check_difficulty(self, difficulty: int) -> None:
        """Raise ``InvalidTaskId`` unless ``difficulty`` is an int in ``1..max_difficulty``."""
        if type(difficulty) is not int or not 1 <= difficulty <= self.max_difficulty:
            raise InvalidTaskId(
                f"difficulty {difficulty!r} out of range for family {self.name!r}:"
                f" must be an int in 1..{self.max_difficulty}"
            )
