"""``status.json``: a node's live state for people and tools, from its first second on.

One writer per run folder. Before the first step the node reports its start-up *phase* (checking
its folder, building the default model with progress, loading the model, joining the swarm,
waiting for peers) and when it entered it, so a node that has not trained yet says what it is
doing instead of showing "step 0"; from the first step on the same file also carries the step's
record and the swarm counters. Writes replace the file atomically, so a reader never sees half
of one.
"""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path
from typing import Any, Callable

__all__ = ["StatusFile", "Phase", "describe_phase"]

Phase = Callable[[str, str], None]  # (phase, detail) -> None: how start-up code reports progress


class StatusFile:
    def __init__(self, run_dir: Path, total_steps: int, model: str, step: int = 0):
        self.path = Path(run_dir) / "status.json"
        self.base: dict[str, Any] = {"step": step, "total_steps": total_steps, "model": model}
        self.phase_name = "starting"
        self.phase_detail = ""
        self.phase_since = time.time()
        self.extra: dict[str, Any] = {}
        # Start-up work in another thread (a model build) reports phases too; after close() (a
        # failed start cleaning up) nothing may write the file again.
        self._lock = threading.Lock()
        self._closed = False

    def close(self) -> None:
        """Write nothing more (a start that failed is removing its files)."""
        with self._lock:
            self._closed = True

    def phase(self, name: str, detail: str = "", write: bool = True) -> None:
        """Enter phase ``name`` (its clock restarts when the name changes, not the detail)."""
        if name != self.phase_name:
            self.phase_since = time.time()
        self.phase_name, self.phase_detail = name, detail
        if write:
            self.write()

    def snapshot(self) -> dict:
        return {**self.base, "phase": self.phase_name, "phase_detail": self.phase_detail,
                "phase_since": self.phase_since, **self.extra, "updated_at": time.time()}

    def write(self, **fields: Any) -> dict:
        """Merge ``fields`` into the status and replace the file; returns what was written."""
        with self._lock:
            for k, v in fields.items():
                (self.base if k in self.base else self.extra)[k] = v
            status = self.snapshot()
            if not self._closed:
                tmp = self.path.with_name("status.json.tmp")
                tmp.write_text(json.dumps(status, indent=2, default=str))
                tmp.replace(self.path)
            return status


def describe_phase(status: dict, now: float | None = None) -> str:
    """One line for a table: ``joining the swarm 12 s (attempt 2/6)``."""
    name = status.get("phase") or "starting"
    since = status.get("phase_since")
    took = f" {max(0, int((now or time.time()) - since))} s" if since else ""
    detail = status.get("phase_detail")
    return f"{name}{took}" + (f" ({detail})" if detail else "")
