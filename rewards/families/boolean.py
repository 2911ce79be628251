"""``boolean`` family: evaluate a propositional formula over ``t`` and ``f``.

Question a formula with ``and``, ``or``, ``not`` and parentheses; answer ``t`` or ``f``, e.g.
``not (t and f) or f`` -> ``t``. ``not`` binds tightest and applies to one literal or one
parenthesized group; every binary sub-formula below the top is parenthesized, so no
and/or precedence is needed to read it. The rare formula longer than ``MAX_QUESTION_CHARS``
is redrawn.

    level  literals  nots
    1      1 or 2    1 or 0   (exactly one operator)
    2      2 or 3    1 or 0
    3      3         1
    4      4         1-2
    5      5         1-2

Scoring accepts ``true``/``false``/``1``/``0`` in any case for ``t``/``f``.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from swarm_node.rewards.families.family import Family
from swarm_node.rewards.families.normalize import canonical_word
from swarm_node.rewards.task import MAX_QUESTION_CHARS

__all__ = ["FAMILY"]


@dataclass
class _Node:
    """Formula tree node; mutable only while ``not`` flags are assigned during generation."""

    value: bool | None = None  # set on literals
    op: str | None = None  # 'and' / 'or' on binary nodes
    left: _Node | None = None
    right: _Node | None = None
    negated: bool = False


_MAX_DRAWS = 64

# Each level picks one (literals, nots) shape uniformly.
_LEVELS: tuple[tuple[tuple[int, int], ...], ...] = (
    ((1, 1), (2, 0)),
    ((2, 1), (3, 0)),
    ((3, 1),),
    ((4, 1), (4, 2)),
    ((5, 1), (5, 2)),
)


def _tree(rng: random.Random, literals: int) -> _Node:
    if literals == 1:
        return _Node(value=bool(rng.randint(0, 1)))
    split = rng.randint(1, literals - 1)
    op = rng.choice(("and", "or"))
    return _Node(op=op, left=_tree(rng, split), right=_tree(rng, literals - split))


def _nodes(node: _Node) -> list[_Node]:
    if node.op is None:
        return [node]
    assert node.left is not None and node.right is not None
    return [node, *_nodes(node.left), *_nodes(node.right)]


def _render(node: _Node, top: bool) -> str:
    if node.op is None:
        text = "t" if node.value else "f"
    else:
        assert node.left is not None and node.right is not None
        text = f"{_render(node.left, False)} {node.op} {_render(node.right, False)}"
        if node.negated or not top:
            text = f"({text})"
    return f"not {text}" if node.negated else text


def _evaluate(node: _Node) -> bool:
    if node.op is None:
        result = bool(node.value)
    else:
        assert node.left is not None and node.right is not None
        left, right = _evaluate(node.left), _evaluate(node.right)
        result = (left and right) if node.op == "and" else (left or right)
    return not result if node.negated else result


def _draw(rng: random.Random, difficulty: int) -> _Node:
    literals, nots = rng.choice(_LEVELS[difficulty - 1])
    root = _tree(rng, literals)
    for node in rng.sample(_nodes(root), nots):
        node.negated = True
    return root


def _generate(rng: random.Random, difficulty: int) -> tuple[str, str]:
    # A few level-5 shapes (all 'and', a negated top) render to 41 characters; redrawing
    # from the same rng keeps the result deterministic and almost never takes a second try.
    for _ in range(_MAX_DRAWS):
        root = _draw(rng, difficulty)
        question = _render(root, top=True)
        if len(question) <= MAX_QUESTION_CHARS:
            return question, "t" if _evaluate(root) else "f"
    raise RuntimeError(
        f"boolean level {difficulty}: no formula within {MAX_QUESTION_CHARS} characters"
    )


_SYNONYMS = {"t": "t", "true": "t", "1": "t", "f": "f", "false": "f", "0": "f"}


def _normalize(answer: str) -> str:
    word = canonical_word(answer)
    return _SYNONYMS.get(word, word)


FAMILY = Family(
    name="boolean",
    max_difficulty=len(_LEVELS),
    description="evaluate a t/f formula with and/or/not: 't and not f' -> 't'",
    generator=_generate,
    normalizer=_normalize,
)
