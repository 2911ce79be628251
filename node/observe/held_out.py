"""How a held-out evaluation is shown: the latest one in a run's records, its headline number, a
run's end score, one line of text for logs and the command line, and how alike two nodes' greedy
answers are (``answers_digest``, ``answer_agreement``).

An evaluation (node/evaluate/evaluate.py) rides in the metrics record of the step it followed, as
``"eval"``: ``{"greedy", "sampled", "n", "families": {family: {"greedy", "sampled", "n"}},
"seconds"}`` (with ``"pass_at_k"`` and ``"k"`` when pass@k is on), so every record stays one
step's and no reader of metrics.jsonl meets a record of another kind. The evaluation before the
first step (``eval.at_start``), which follows no step, is a file of its own, ``eval/step_0.json``,
where ``swarm-node eval`` writes the evaluations it makes after the fact (``eval_file``).

A run's **end score** (``end_score``) is the mean of its last ``END_EVALUATIONS`` evaluations after
training began, not the last one alone: one reading also carries where the step-to-step noise of
training left the weights at that step, and three readings at the end of a run average that, and
the sampled answers' noise, down (issue 37). They ask the same questions, so the questions' own
standard error, about sqrt(p(1 - p) / n), stays: more held-out tasks lower that. The curve (every
evaluation) stays in metrics.jsonl and held_out.png.
"""

from __future__ import annotations

import hashlib
import json
import statistics
from collections.abc import Iterable
from pathlib import Path

__all__ = ["last_eval", "start_eval", "evaluations", "eval_file", "held_out_score", "describe_eval", "end_steps",
           "end_score", "END_EVALUATIONS", "answers_digest", "answer_agreement", "ANSWER_HEX"]

END_EVALUATIONS = 3  # evaluations a run's end score averages


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


ANSWER_HEX = 4  # hex digits a greedy answer keeps in ``greedy_answers``: 1 in 65,536 unlike answers look alike


def answers_digest(texts: Iterable[str]) -> str:
    """The greedy completions of an evaluation, each as ``ANSWER_HEX`` hex digits of its digest (its
    text stripped), in the evaluation's task order: enough to tell two nodes' answers to the same
    question apart, at 1 KB for 256 questions."""
    return "".join(hashlib.blake2s(t.strip().encode(), digest_size=ANSWER_HEX // 2).hexdigest() for t in texts)


def answer_agreement(a: str | None, b: str | None) -> float | None:
    """The share of questions two evaluations of the same questions answered alike (greedy, by
    ``answers_digest``): how alike two nodes' policies have become. None when either lacks the
    digest or they asked different numbers of questions."""
    if not a or not b or len(a) != len(b) or len(a) % ANSWER_HEX:
        return None
    n = len(a) // ANSWER_HEX
    return sum(a[i:i + ANSWER_HEX] == b[i:i + ANSWER_HEX] for i in range(0, len(a), ANSWER_HEX)) / n


def held_out_score(ev: dict | None) -> float | None:
    """The one number a table shows of an evaluation: greedy pass@1, or sampled pass@1 when the
    node evaluates without a greedy completion."""
    if not ev:
        return None
    return ev.get("greedy") if ev.get("greedy") is not None else ev.get("sampled")


def end_steps(steps: Iterable[int], last: int = END_EVALUATIONS) -> list[int]:
    """The evaluated steps an end score averages, in order: the last ``last`` after training began;
    the evaluation before training (step 0) only when there is no other."""
    ordered = sorted(set(steps))
    trained = [s for s in ordered if s > 0]
    return trained[-last:] if trained else ordered[-1:]


def end_score(evals: list[dict], last: int = END_EVALUATIONS) -> dict | None:
    """A run's end score from its evaluations (``evaluations``): ``{"steps": [...], "score",
    "greedy", "sampled"}``, each the mean over the evaluations at ``end_steps`` (``score`` of
    ``held_out_score``'s); a statistic missing from one of them is None. None without an evaluation."""
    by_step = {ev["step"]: ev for ev in evals}
    steps = end_steps(by_step, last)
    if not steps:
        return None
    chosen = [by_step[s] for s in steps]

    def mean(values: list) -> float | None:
        return None if any(v is None for v in values) else statistics.fmean(values)

    return {"steps": steps, "score": mean([held_out_score(ev) for ev in chosen]),
            "greedy": mean([ev.get("greedy") for ev in chosen]), "sampled": mean([ev.get("sampled") for ev in chosen])}


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
