"""The answer format: ``<answer>X</answer>``, how to build it and how to read it back.

Completions come from a policy that may emit anything, so extraction scans at most
``MAX_SCAN_CHARS`` characters, never raises on any ``str``, and takes the first complete block.

``extract_lenient`` reads an answer from a completion with no block too, where the task allows:
the last ``\\boxed{X}``, else (for a task whose answer is a number) the last number written. A
small instruct model answers in its own words ("The answer is 4."): held to the tags alone it
scores 0 on everything and RL has nothing to learn from (SmolLM2-135M-Instruct wrote the tags in
almost none of its samples with the instruction alone, docs/results/bench_real_model.md's probe). This is lm-evaluation-harness's "flexible-extract"
beside its "strict-match" on GSM8K; SimpleRL-Zoo (Zeng et al., 2025) reports that a rigid format
requirement hinders exploration in RL for models that follow instructions poorly; the format bonus (rewards/scoring.py) still goes to the block only,
so training moves the model toward it.
"""

from __future__ import annotations

import re

__all__ = [
    "ANSWER_CLOSE",
    "ANSWER_OPEN",
    "MAX_SCAN_CHARS",
    "extract_answer",
    "extract_lenient",
    "format_answer",
    "is_number",
    "is_well_formed",
]

ANSWER_OPEN = "<answer>"
ANSWER_CLOSE = "</answer>"
# Real completions are a few dozen characters; the cap bounds work on a runaway generation.
MAX_SCAN_CHARS = 4096


def format_answer(ans: str) -> str:
    """The completion a perfect policy emits for ground truth ``ans`` (warm-start targets)."""
    return f"{ANSWER_OPEN}{ans}{ANSWER_CLOSE}"


def _first_block(text: str) -> tuple[int, int] | None:
    """``(content_start, content_end)`` of the first complete block, or None.

    The first close tag after an open tag ends the block, and the block starts at the last
    open tag before it, so in ``<answer>a<answer>b</answer>`` the block is ``b``.
    """
    first_open = text.find(ANSWER_OPEN)
    if first_open == -1:
        return None
    close = text.find(ANSWER_CLOSE, first_open + len(ANSWER_OPEN))
    if close == -1:
        return None
    start = text.rfind(ANSWER_OPEN, first_open, close)
    return start + len(ANSWER_OPEN), close


def extract_answer(completion: str) -> str | None:
    """The stripped content of the first complete answer block, or None if there is none.

    Only the first ``MAX_SCAN_CHARS`` characters are examined.
    """
    text = completion[:MAX_SCAN_CHARS]
    block = _first_block(text)
    if block is None:
        return None
    content_start, content_end = block
    return text[content_start:content_end].strip()


def is_well_formed(completion: str) -> bool:
    """True for exactly ``<answer>X</answer>`` with non-empty X, up to surrounding whitespace.

    Completions longer than ``MAX_SCAN_CHARS`` are never well-formed.
    """
    if len(completion) > MAX_SCAN_CHARS:
        return False
    text = completion.strip()
    if not (text.startswith(ANSWER_OPEN) and text.endswith(ANSWER_CLOSE)):
        return False
    content = text[len(ANSWER_OPEN) : len(text) - len(ANSWER_CLOSE)]
    # Exactly one block: no stray tags inside (this also rejects two blocks back to back).
    if ANSWER_OPEN in content or ANSWER_CLOSE in content:
        return False
    return bool(content.strip())


# Commas only as thousands separators: "1,2" (a list) is two numbers, "1,234" is one.
_NUMBER = re.compile(r"[-+]?(?:(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?|\.\d+)(?:[eE][-+]?\d+)?")
_BOXED = "\\boxed{"


def is_number(text: str) -> bool:
    """Whether ``text`` is one number (a task "allows" the last-number reading then)."""
    return _NUMBER.fullmatch(text.strip()) is not None  # "4 7 8" (a list) is not one number


def _last_boxed(text: str) -> str | None:
    start = text.rfind(_BOXED)
    if start == -1:
        return None
    depth, i = 1, start + len(_BOXED)
    for j in range(i, len(text)):  # braces nest: \boxed{\frac{1}{2}}
        depth += {"{": 1, "}": -1}.get(text[j], 0)
        if depth == 0:
            return text[i:j].strip() or None
    return None


def extract_lenient(completion: str, numeric: bool) -> str | None:
    """The answer block's content if there is one (in the first ``MAX_SCAN_CHARS``); else the last
    ``\\boxed{X}``; else, when the task's answer is a number (``numeric``), the last number written
    (thousands commas dropped), both in the last ``MAX_SCAN_CHARS``. None when nothing can be read."""
    found = extract_answer(completion)
    if found is not None:
        return found
    text = completion[-MAX_SCAN_CHARS:]  # the end of a long completion: where a final answer is
    boxed = _last_boxed(text)
    if boxed is not None:
        return boxed
    if not numeric:
        return None
    numbers = _NUMBER.findall(text)
    return numbers[-1].replace(",", "") if numbers else None
