"""How a held-out evaluation is shown: the latest one in a run's records, its headline number, and
one line of text for logs and the command line.

An evaluation (node/run/evaluate.py) rides in the metrics record of the step it followed, as
``"eval"``: ``{"greedy", "sampled", "n", "families": {family: {"greedy", "sampled", "n"}},
"seconds"}`` (with ``"pass_at_k"`` and ``"k"`` when pass@k is on), so every record stays one
step's and no reader of metrics.jsonl meets a record of another kind. The evaluation before the
first step (``eval.at_start``), which follows no step, is a file of its own, ``eval/step_0.json``,
where ``swarm-node eval`` writes the evaluations it makes after the fact (``eval_file``).
"""

from __future__ import annotations

import json
from pathlib import Path

__all__ = ["last_eval", "start_eval", "evaluations", "eval_file", "held_out_score", "describe_eval"]


def eval_file(run_dir: Path, step: int) -> Path:
    """Where an evaluation of step ``step`` made outside a step's record is kept: the one before
    training (step 0), and ``swarm-node eval``'s of a checkpoint."""
    return Path(run_dir) / "eval" / f"step_{step}.json"


def start_eval(run_dir: Path) -> dict | None:
    """The evaluation before the first step (``{"step": 0, "greedy": ...}``), or None when the run
    made none (``eval.at_start`` off, or a run from before it) or its file is unreadable."""
    try:
        ev = json.loads(eval_file(run_dir, 0).read_text())
    except (OSError, ValueError):
        return None
    return ev if isinstance(ev, dict) and ev.get("step") == 0 else None


def evaluations(records: list[dict], run_dir: Path | None = None) -> list[dict]:
    """Every held-out evaluation of a run in step order, each with its step: the one before
    training (from ``run_dir``, when given and made), then each record's."""
    start = start_eval(run_dir) if run_dir is not None else None
    recorded = [{"step": r["step"], **r["eval"]} for r in records if "step" in r and isinstance(r.get("eval"), dict)]
    return ([start] if start is not None else []) + recorded


def last_eval(records: list[dict]) -> dict | None:
    """The last held-out evaluation in a run's records, with its step (``{"step": 40, "greedy":
    ...}``), or None when the run never evaluated."""
    for r in reversed(records):
        if isinstance(r.get("eval"), dict):
            return {"step": r.get("step"), **r["eval"]}
    return None


def held_out_score(ev: dict | None) -> float | None:
    """The one number a table shows of an evaluation: greedy pass@1, or sampled pass@1 when the
    node evaluates without a greedy completion."""
    if not ev:
        return None
    return ev.get("greedy") if ev.get("greedy") is not None else ev.get("sampled")


def describe_eval(ev: dict) -> str:
    """``greedy 0.312 sampled 0.275 (arithmetic 0.50/0.41, ...) in 2.1 s``: overall, then greedy/
    sampled per family."""
    def pair(d: dict) -> str:
        return "/".join(f"{d[k]:.2f}" for k in ("greedy", "sampled") if d.get(k) is not None)

    head = " ".join(f"{k} {ev[k]:.3f}" for k in ("greedy", "sampled") if ev.get(k) is not None)
    if ev.get("pass_at_k") is not None:
        head += f" pass@{ev.get('k')} {ev['pass_at_k']:.3f}"
    families = ", ".join(f"{f} {pair(d)}" for f, d in (ev.get("families") or {}).items())
    return f"{head} ({families})" + (f" in {ev['seconds']:.1f} s" if ev.get("seconds") is not None else "")
