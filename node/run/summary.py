"""The end of a run: ``summary.json`` (correctness over the first and last steps, steps done,
wall time, what the swarm contributed, the last held-out evaluation and the end score, the mean of
the last three: node/observe/held_out.py) and ``reward_curve.png``
(and ``held_out.png`` when the run evaluated), read back from metrics.jsonl.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from swarm_node.node.observe.held_out import end_score, evaluations, last_eval
from swarm_node.node.observe.metrics import read_metrics, summary_window
from swarm_node.node.observe.plots import plot_held_out, plot_reward_curve

__all__ = ["write_summary", "SWARM_SUMMARY_KEYS"]

# What summary.json keeps of the exchange's status (node/swarm/exchange.py).
SWARM_SUMMARY_KEYS = ("peer_id", "peers_alive", "peers_heard", "peers_used", "groups_used_by_peer", "rollouts_out",
                      "groups_in", "groups_used", "dropped_stale", "dropped_held_out", "dropped_unknown_family",
                      "unusable_batches", "rejected",
                      "rejected_total")


def write_summary(run_dir: Path, *, steps: int, stopped_early: bool, wall_s: float,
                  swarm_status: dict | None, rounds_skipped: int, plot: bool) -> dict:
    """Write ``run_dir/summary.json`` (and the reward curve when ``plot``); return the summary.

    ``swarm_status``: the exchange's status at the end, or None for a node that trained alone."""
    recs = read_metrics(run_dir / "metrics.jsonl")
    correct = [r.get("correct") or 0.0 for r in recs]
    w = summary_window(len(correct))
    summary = {
        "steps": steps,
        "stopped_early": stopped_early,
        "wall_s_this_session": round(wall_s, 1),
        "correct_first": float(np.mean(correct[:w])) if correct else None,
        "correct_last": float(np.mean(correct[-w:])) if correct else None,
        "window": w,
        "run_dir": str(run_dir),
    }
    if swarm_status is not None:
        summary["swarm"] = {k: swarm_status[k] for k in SWARM_SUMMARY_KEYS}
        summary["swarm"]["rounds_skipped"] = rounds_skipped
    if summary["correct_first"]:
        summary["improvement"] = summary["correct_last"] / summary["correct_first"]
    held_out = last_eval(recs)  # the last held-out evaluation (node/evaluate/evaluate.py), per family too
    if held_out is not None:
        summary["eval"] = held_out
        summary["eval_end"] = end_score(evaluations(recs, run_dir))  # the mean of the last three
    if plot and recs:
        summary["plot"] = str(plot_reward_curve(run_dir / "metrics.jsonl", run_dir / "reward_curve.png"))
        if held_out is not None:
            summary["plot_held_out"] = str(plot_held_out(run_dir / "metrics.jsonl", run_dir / "held_out.png"))
    (run_dir / "summary.json").write_text(json.dumps(summary, indent=2))
    return summary
