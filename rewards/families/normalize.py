"""Canonicalization helpers shared by the family normalizers.

Normalizers are deliberately lenient about presentation (case, surrounding space, leading
zeros, list separators) and strict about content, so format noise never costs correctness
reward but a wrong value never earns it.
"""

from __future__ import annotations

import re

__all__ = ["canonical_int", "canonical_token", "canonical_word"]

# ASCII digits only: int() alone would also accept '1_000' and non-ASCII digits.
_INT_RE = re.compile(r"[+-]?[0-9]+")
# Far above any ground truth; keeps int() clear of its 4300-digit limit on hostile input.
_MAX_INT_CHARS = 64


def canonical_int(text: str) -> str | None:
    """``" +007 "`` -> ``"7"``; ``None`` when ``text`` is not a plain integer."""
    stripped = text.strip()
    if len(stripped) > _MAX_INT_CHARS or not _INT_RE.fullmatch(stripped):
        return None
    return str(int(stripped))


def canonical_word(text: str) -> str:
    """Strip and lowercase, collapsing inner runs of whitespace to one space."""
    return " ".join(text.lower().split())


def canonical_token(text: str) -> str:
    """An integer in canonical form if ``text`` is one, else ``canonical_word(text)``."""
    as_int = canonical_int(text)
    return as_int if as_int is not None else canonical_word(text)
