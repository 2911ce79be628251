"""``counting`` family: simple questions about a short lowercase string.

    ``count <c> in <s>`` -> occurrences of letter c in s    ``count a in abca`` -> ``2``
    ``len <s>``          -> number of characters of s       ``len abca``        -> ``4``
    ``rev <s>``          -> s reversed                      ``rev abca``        -> ``acba``

    level  length  letters
    1      1-3     a b
    2      3-5     a b c
    3      5-8     a..f
    4      8-12    a..m
    5      12-16   a..z
"""

from __future__ import annotations

import random
import string
from dataclasses import dataclass

from swarm_node.rewards.families.family import Family
from swarm_node.rewards.families.normalize import canonical_token

__all__ = ["FAMILY"]


@dataclass(frozen=True)
class _Level:
    min_len: int
    max_len: int
    letters: str


_LEVELS = (
    _Level(1, 3, "ab"),
    _Level(3, 5, "abc"),
    _Level(5, 8, string.ascii_lowercase[:6]),
    _Level(8, 12, string.ascii_lowercase[:13]),
    _Level(12, 16, string.ascii_lowercase),
)


def _generate(rng: random.Random, difficulty: int) -> tuple[str, str]:
    level = _LEVELS[difficulty - 1]
    length = rng.randint(level.min_len, level.max_len)
    text = "".join(rng.choice(level.letters) for _ in range(length))
    op = rng.choice(("count", "len", "rev"))
    if op == "count":
        # Mostly ask about a letter that occurs, so the answer is not almost always 0.
        letter = rng.choice(text) if rng.randint(0, 3) else rng.choice(level.letters)
        return f"count {letter} in {text}", str(text.count(letter))
    if op == "len":
        return f"len {text}", str(len(text))
    return f"rev {text}", text[::-1]


FAMILY = Family(
    name="counting",
    max_difficulty=len(_LEVELS),
    description="count a letter, length or reverse of a string: 'count a in abca' -> '2'",
    generator=_generate,
    normalizer=canonical_token,
)
