"""A peer's text as it may reach a terminal or a log: what every place that shows a peer's words
(the doctor's checks, a dial-back answer) passes it through first."""

from __future__ import annotations

import unicodedata

__all__ = ["printable", "MAX_TEXT"]

MAX_TEXT = 300  # characters of a peer's text shown to the user


def printable(text: object, limit: int | None = MAX_TEXT) -> str:
    """A peer's text as it may reach a terminal: control and format characters (ANSI escapes,
    newlines, bidi overrides) replaced by ``?``, at most ``limit`` characters (None: all)."""
    s = str(text)[:limit]
    return "".join("?" if unicodedata.category(ch)[0] == "C" else ch for ch in s)
