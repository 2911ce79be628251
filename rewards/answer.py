"""The answer format: ``<answer>X</answer>``, how to build it and how to read it back.

Completions come from a policy that may emit anything, so extraction scans at most
``MAX_SCAN_CHARS`` characters, never raises on any ``str``, and takes the first complete block.
"""

from __future__ import annotations

__all__ = [
    "ANSWER_CLOSE",
    "ANSWER_OPEN",
    "MAX_SCAN_CHARS",
    "extract_answer",
    "format_answer",
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
