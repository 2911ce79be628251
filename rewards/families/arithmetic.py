"""``arithmetic`` family: integer expressions with + - * and (at level 5) parentheses.

Question ``<expression>=``, answer the integer value (may be negative), e.g. ``3+5=`` -> ``8``.
Standard precedence (``*`` before ``+``/``-``, left to right otherwise).

    1  a+b            a, b in 0..9
    2  a+b | a-b      two-digit operands
    3  a*b+c, c-a*b.. a, b in 2..9, c two-digit
    4  a?b?c          three two-digit operands, ? in + - *
    5  a?b?c          three three-digit operands, optionally one parenthesized pair
"""

from __future__ import annotations

import random
from collections.abc import Callable

from swarm_node.rewards.families.family import Family
from swarm_node.rewards.families.normalize import canonical_token

__all__ = ["FAMILY"]

_OPS: dict[str, Callable[[int, int], int]] = {
    "+": lambda a, b: a + b,
    "-": lambda a, b: a - b,
    "*": lambda a, b: a * b,
}


def _eval3(a: int, op1: str, b: int, op2: str, c: int) -> int:
    """Value of ``a op1 b op2 c`` with ``*`` binding tighter than ``+``/``-``."""
    if op2 == "*" and op1 != "*":
        return _OPS[op1](a, b * c)
    return _OPS[op2](_OPS[op1](a, b), c)


def _level1(rng: random.Random) -> tuple[str, int]:
    a, b = rng.randint(0, 9), rng.randint(0, 9)
    return f"{a}+{b}", a + b


def _level2(rng: random.Random) -> tuple[str, int]:
    a, b = rng.randint(10, 99), rng.randint(10, 99)
    op = rng.choice("+-")
    return f"{a}{op}{b}", _OPS[op](a, b)


def _level3(rng: random.Random) -> tuple[str, int]:
    a, b, c = rng.randint(2, 9), rng.randint(2, 9), rng.randint(10, 99)
    op = rng.choice("+-")
    if rng.randint(0, 1):
        return f"{a}*{b}{op}{c}", _OPS[op](a * b, c)
    return f"{c}{op}{a}*{b}", _OPS[op](c, a * b)


def _three_operands(rng: random.Random, low: int, high: int, parens: bool) -> tuple[str, int]:
    a, b, c = (rng.randint(low, high) for _ in range(3))
    op1, op2 = rng.choice("+-*"), rng.choice("+-*")
    # Parenthesize a pair in 2 of 3 cases at level 5, so precedence alone never suffices.
    group = rng.choice(("none", "left", "right")) if parens else "none"
    if group == "left":
        return f"({a}{op1}{b}){op2}{c}", _OPS[op2](_OPS[op1](a, b), c)
    if group == "right":
        return f"{a}{op1}({b}{op2}{c})", _OPS[op1](a, _OPS[op2](b, c))
    return f"{a}{op1}{b}{op2}{c}", _eval3(a, op1, b, op2, c)


def _level4(rng: random.Random) -> tuple[str, int]:
    return _three_operands(rng, 10, 99, parens=False)


def _level5(rng: random.Random) -> tuple[str, int]:
    return _three_operands(rng, 100, 999, parens=True)


_LEVELS = (_level1, _level2, _level3, _level4, _level5)


def _generate(rng: random.Random, difficulty: int) -> tuple[str, str]:
    expression, value = _LEVELS[difficulty - 1](rng)
    return f"{expression}=", str(value)


FAMILY = Family(
    name="arithmetic",
    max_difficulty=len(_LEVELS),
    description="evaluate an integer expression: '12+7=' -> '19'",
    generator=_generate,
    normalizer=canonical_token,
)
