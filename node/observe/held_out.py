"""How a held-out evaluation is shown: the latest one in a run's records, its headline number, and
one line of text for logs and the command line.

An evaluation (node/run/evaluate.py) rides in the metrics record of the step it followed, as
``"eval"``: ``{"greedy", "sampled", "n", "families": {family: {"greedy", "sampled", "n"}},
"seconds"}`` (with ``"pass_at_k"`` and ``"k"`` when pass@k is on), so every record stays one
step's and no reader of metrics.jsonl meets a record of another kind.
"""

from __future__ import annotations

__all__ = ["last_eval", "held_out_score", "describe_eval"]


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
