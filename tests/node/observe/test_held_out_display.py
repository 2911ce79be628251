"""Where a held-out evaluation shows: the metrics endpoint's gauges, the live panel's column, the
plots, and the helpers that find and describe the latest one."""

from __future__ import annotations

import json

import pytest
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from swarm_node.node.observe.endpoint import MetricsEndpoint
from swarm_node.node.observe.held_out import describe_eval, end_score, end_steps, held_out_score, last_eval
from swarm_node.node.observe.plots import plot_folder, plot_held_out
from swarm_node.node.observe.progress import Progress

EVAL = {"greedy": 0.3, "sampled": 0.25, "n": 4, "pass_at_k": 0.5, "k": 2, "seconds": 1.5,
        "families": {"arithmetic": {"greedy": 0.5, "sampled": 0.25, "n": 2, "pass_at_k": 0.75},
                     "lists": {"greedy": 0.0, "sampled": 0.25, "n": 2, "pass_at_k": 0.25}}}


def _records(n: int = 4, every: int = 2) -> list[dict]:
    return [{"step": s, "correct": 0.1, "reward": 0.2, "rho": 1.0, "lr_factor": 1.0,
             **({"eval": {**EVAL, "greedy": s / 10}} if s % every == 0 else {})} for s in range(1, n + 1)]


def test_latest_headline_and_one_line():
    recs = _records()
    assert last_eval(recs) == {"step": 4, **EVAL, "greedy": 0.4}
    assert last_eval([{"step": 1}]) is None
    assert held_out_score(EVAL) == 0.3 and held_out_score({**EVAL, "greedy": None}) == 0.25
    assert held_out_score(None) is None
    assert describe_eval(EVAL) == ("greedy 0.300 sampled 0.250 pass@2 0.500 (arithmetic 0.50/0.25, "
                                   "lists 0.00/0.25) in 1.5 s")


def test_the_end_score_is_the_mean_of_the_last_three_evaluations_after_training_began():
    assert end_steps([0, 25, 50, 75, 100]) == [50, 75, 100]
    assert end_steps([100, 0, 50]) == [50, 100]  # two after the start: both, never step 0 with them
    assert end_steps([0]) == [0] and end_steps([]) == []  # only the start: it
    evals = [{"step": 0, "greedy": 0.1, "sampled": 0.05}, {"step": 25, "greedy": 0.2, "sampled": 0.1},
             {"step": 50, "greedy": 0.3, "sampled": 0.2}, {"step": 75, "greedy": 0.5, "sampled": 0.2},
             {"step": 100, "greedy": 0.4, "sampled": 0.5}]
    end = end_score(evals)
    assert end["steps"] == [50, 75, 100]
    assert end["greedy"] == pytest.approx(0.4) and end["score"] == pytest.approx(0.4)  # (0.3 + 0.5 + 0.4) / 3
    assert end["sampled"] == pytest.approx(0.3)  # (0.2 + 0.2 + 0.5) / 3
    no_greedy = [{**e, "greedy": None} for e in evals]  # eval.greedy off: the score is sampled's
    assert end_score(no_greedy)["greedy"] is None and end_score(no_greedy)["score"] == pytest.approx(0.3)
    assert end_score([]) is None


def test_endpoint_exports_the_latest_evaluation_per_family_and_mode():
    ep = MetricsEndpoint("127.0.0.1", 0)  # not started: the registry is collected directly
    ep.update({"step": 6, "total_steps": 10, "model": "m", "last": {"reward": 0.2}, "eval": {"step": 4, **EVAL}})
    m = {(s.name, tuple(sorted(s.labels.items()))): s.value
         for fam in text_string_to_metric_families(generate_latest(ep.registry).decode()) for s in fam.samples}
    assert m[("swarm_node_held_out_correct", (("family", "all"), ("mode", "greedy")))] == 0.3
    assert m[("swarm_node_held_out_correct", (("family", "all"), ("mode", "sampled")))] == 0.25
    assert m[("swarm_node_held_out_correct", (("family", "arithmetic"), ("mode", "pass_at_k")))] == 0.75
    assert m[("swarm_node_held_out_correct", (("family", "lists"), ("mode", "greedy")))] == 0.0
    assert m[("swarm_node_held_out_step", ())] == 4 and m[("swarm_node_held_out_seconds", ())] == 1.5
    ep.update({"step": 1, "total_steps": 10, "model": "m", "last": {"reward": 0.2}})
    assert "held_out" not in generate_latest(ep.registry).decode()  # nothing before the first evaluation


def test_the_live_panel_shows_the_latest_held_out_correctness():
    from rich.console import Console

    p = Progress("off", 10)
    console = Console(width=200, record=True)
    step = {"step": 1, "reward": 0.2, "correct": 0.1}
    console.print(p._render(step))
    text = console.export_text()
    assert "held-out" in text and " - " in text
    p.update({**step, "step": 2, "eval": EVAL})
    p.update({**step, "step": 3})  # a later step without one keeps showing the latest
    console.print(p._render({**step, "step": 3}))
    assert "0.300" in console.export_text()


def test_the_live_panel_starts_with_the_runs_latest_evaluation_and_an_eta_from_the_first_step(tmp_path):
    """The column showed "-" though the evaluation before training existed; after a resume, until
    the next evaluation. The ETA counted the start's evaluation as training time."""
    from rich.console import Console

    (tmp_path / "eval").mkdir()
    (tmp_path / "eval" / "step_0.json").write_text(json.dumps({"step": 0, **EVAL, "greedy": 0.125}))
    p = Progress("off", 10)
    p.t0 -= 3600  # an hour before training began (the evaluation at start, a model's load)
    p.begin(tmp_path)
    console = Console(width=200, record=True)
    console.print(p._render({"step": 1, "reward": 0.2, "correct": 0.1}))
    assert "0.125" in console.export_text()
    assert p._eta(1) < 60  # from begin, not from the hour before
    (tmp_path / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in _records()))
    p.begin(tmp_path)  # a resumed run: its last record's evaluation
    assert held_out_score(p.held_out) == 0.4


def test_plots_draw_held_out_per_family_and_plot_redraws_it(tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    (run / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in _records()))
    assert plot_held_out(run / "metrics.jsonl", run / "h.png").stat().st_size > 1000
    assert run / "held_out.png" in plot_folder(run)
    bare = tmp_path / "bare"
    bare.mkdir()
    (bare / "metrics.jsonl").write_text(json.dumps({"step": 1, "correct": 0.1}) + "\n")
    assert plot_folder(bare) == [bare / "reward_curve.png"]  # a run that never evaluated: no held-out plot
    from swarm_node.node.errors import NodeError

    with pytest.raises(NodeError, match="no held-out evaluation"):
        plot_held_out(bare / "metrics.jsonl", bare / "h.png")


def test_greedy_answers_are_kept_per_question_and_two_evaluations_compare_answer_by_answer():
    from swarm_node.node.observe.held_out import ANSWER_HEX, answer_agreement, answers_digest

    a = answers_digest(["<answer>3</answer>", "<answer>aab</answer> ", "x", "<answer>7</answer>"])
    b = answers_digest(["<answer>3</answer>", "<answer>aab</answer>", "y", "<answer>8</answer>"])
    assert len(a) == 4 * ANSWER_HEX and a[:8] == b[:8]  # the same text (stripped) gives the same digits
    assert answer_agreement(a, b) == 0.5  # two of four alike
    assert answer_agreement(a, a) == 1.0
    assert answer_agreement(a, b[:8]) is None  # other questions: no comparison
    assert answer_agreement(a, None) is None and answer_agreement("", "") is None
