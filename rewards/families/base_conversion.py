"""``base`` family: convert a non-negative integer between base 10 and another base.

Two question forms, digits above 9 written ``a``..``f``:

    ``<n> to base <b>``       decimal n -> its base-b digits    ``13 to base 2``   -> ``1101``
    ``<digits> from base <b>`` base-b digits -> decimal          ``1101 from base 2`` -> ``13``

    level  bases                   values
    1      2                       0..7
    2      2                       0..31
    3      2, 8                    0..255
    4      2, 3, 8, 16             0..1023
    5      2..16 except 10         0..65535
"""

from __future__ import annotations

import random
import re
from dataclasses import dataclass

from swarm_node.rewards.families.family import Family
from swarm_node.rewards.families.normalize import canonical_word

__all__ = ["FAMILY", "to_base"]

_DIGITS = "0123456789abcdef"


@dataclass(frozen=True)
class _Level:
    bases: tuple[int, ...]
    high: int


_LEVELS = (
    _Level((2,), 7),
    _Level((2,), 31),
    _Level((2, 8), 255),
    _Level((2, 3, 8, 16), 1023),
    _Level(tuple(b for b in range(2, 17) if b != 10), 65535),
)


def to_base(value: int, base: int) -> str:
    """Digits of non-negative ``value`` in ``base`` (2..16), most significant first."""
    if value == 0:
        return "0"
    digits = []
    while value:
        value, digit = divmod(value, base)
        digits.append(_DIGITS[digit])
    return "".join(reversed(digits))


def _generate(rng: random.Random, difficulty: int) -> tuple[str, str]:
    level = _LEVELS[difficulty - 1]
    base = rng.choice(level.bases)
    value = rng.randint(0, level.high)
    if rng.randint(0, 1):
        return f"{value} to base {base}", to_base(value, base)
    return f"{to_base(value, base)} from base {base}", str(value)


_NUMERAL_RE = re.compile(r"[0-9a-z]+")


def _normalize(answer: str) -> str:
    # Leading zeros do not change a numeral's value: '0101' == '101', '000' == '0'.
    word = canonical_word(answer)
    if _NUMERAL_RE.fullmatch(word):
        return word.lstrip("0") or "0"
    return word


FAMILY = Family(
    name="base",
    max_difficulty=len(_LEVELS),
    description="base conversion: '13 to base 2' -> '1101', '1101 from base 2' -> '13'",
    generator=_generate,
    normalizer=_normalize,
)
