"""``lists`` family: one operation on a short list of integers written with spaces.

Question ``<op> <x1> <x2> ...``, op in ``sort`` (ascending), ``rev``, ``max``, ``min``,
``sum``; answer a space-separated list or one integer, e.g. ``sort 3 1 2`` -> ``1 2 3``.

    level  length  values
    1      2-3     0..9
    2      3-4     0..9
    3      4-5     0..19
    4      5-6     0..99
    5      6-8     -99..99

List-valued answers (sort, rev) use fewer items when the full list could not fit in
``MAX_ANSWER_CHARS``.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass

from swarm_node.rewards.families.family import Family
from swarm_node.rewards.families.normalize import canonical_token
from swarm_node.rewards.task import MAX_ANSWER_CHARS

__all__ = ["FAMILY"]


@dataclass(frozen=True)
class _Level:
    min_len: int
    max_len: int
    low: int
    high: int

    @property
    def list_answer_cap(self) -> int:
        """Most items whose space-separated rendering always fits in ``MAX_ANSWER_CHARS``."""
        width = max(len(str(self.low)), len(str(self.high)))
        return (MAX_ANSWER_CHARS + 1) // (width + 1)


_LEVELS = (
    _Level(2, 3, 0, 9),
    _Level(3, 4, 0, 9),
    _Level(4, 5, 0, 19),
    _Level(5, 6, 0, 99),
    _Level(6, 8, -99, 99),
)

# op -> (is list-valued, computation)
_OPS: dict[str, tuple[bool, Callable[[list[int]], list[int]]]] = {
    "sort": (True, sorted),
    "rev": (True, lambda xs: xs[::-1]),
    "max": (False, lambda xs: [max(xs)]),
    "min": (False, lambda xs: [min(xs)]),
    "sum": (False, lambda xs: [sum(xs)]),
}


def _join(xs: list[int]) -> str:
    return " ".join(str(x) for x in xs)


def _generate(rng: random.Random, difficulty: int) -> tuple[str, str]:
    level = _LEVELS[difficulty - 1]
    op = rng.choice(sorted(_OPS))
    list_valued, compute = _OPS[op]
    length = rng.randint(level.min_len, level.max_len)
    if list_valued:
        length = min(length, level.list_answer_cap)
    xs = [rng.randint(level.low, level.high) for _ in range(length)]
    return f"{op} {_join(xs)}", _join(compute(xs))


def _normalize(answer: str) -> str:
    # Accept '[1, 2, 3]', '1,2,3' and '1  2 3' for '1 2 3'; each item canonicalized as an int.
    spaced = answer.translate(str.maketrans(",[]()", "     "))
    return " ".join(canonical_token(item) for item in spaced.split())


FAMILY = Family(
    name="lists",
    max_difficulty=len(_LEVELS),
    description="sort/rev/max/min/sum of a short int list: 'sort 3 1 2' -> '1 2 3'",
    generator=_generate,
    normalizer=_normalize,
)
