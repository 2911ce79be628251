"""Per-step metrics as JSON lines: the node's record of what happened, and the plots' input.

One object per line, appended and flushed each step so a crash loses at most the line being
written; ``read_metrics`` skips a torn last line instead of failing. On resume the writer drops
records past the checkpoint's step, so the file never holds two histories.
"""

from __future__ import annotations

import json
import logging
import math
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)

__all__ = ["MetricsWriter", "read_metrics", "summary_window", "SUMMARY_WINDOW"]

SUMMARY_WINDOW = 20  # steps averaged for the first/last correctness of a summary


def _clean(v: Any) -> Any:
    # JSON has no NaN/inf: write null so every line stays parseable by any reader.
    if isinstance(v, float) and not math.isfinite(v):
        return None
    return v


def summary_window(n_steps: int) -> int:
    """Steps averaged for a summary's "first" and "last" numbers: SUMMARY_WINDOW, or half the
    run when it is shorter (so first and last never overlap); summaries print the number used."""
    return min(SUMMARY_WINDOW, max(1, n_steps // 2))


def read_metrics(path: Path) -> list[dict]:
    records = []
    if not path.exists():
        return records
    with path.open() as f:
        for n, line in enumerate(f, 1):
            line = line.strip()
            if not line:
                continue
            try:
                records.append(json.loads(line))
            except json.JSONDecodeError:
                log.warning("%s line %d is not valid JSON (torn write?): skipped", path, n)
    return records


class MetricsWriter:
    def __init__(self, path: Path, resume_from_step: int | None = None):
        self.path = path
        path.parent.mkdir(parents=True, exist_ok=True)
        if resume_from_step is not None:
            kept = [r for r in read_metrics(path) if r.get("step", 0) <= resume_from_step]
            tmp = path.with_suffix(".tmp")
            tmp.write_text("".join(json.dumps(r) + "\n" for r in kept))
            tmp.replace(path)
        elif path.exists():
            path.unlink()  # a fresh run owns its metrics file
        self._f = path.open("a")

    def write(self, record: dict[str, Any]) -> None:
        self._f.write(json.dumps({k: _clean(v) for k, v in record.items()}) + "\n")
        self._f.flush()

    def close(self) -> None:
        if not self._f.closed:
            self._f.close()
