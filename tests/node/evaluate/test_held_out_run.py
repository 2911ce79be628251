"""Held-out evaluation in a training run: every ``eval.every`` steps and after the last, in the
step's metrics record, status.json and summary.json, without changing what the node trains."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
from safetensors.torch import load_file

from swarm_node.node.observe.metrics import read_metrics
from swarm_node.node.config.config import load_config
from swarm_node.node.evaluate.evaluate import HeldOut
from swarm_node.policies.prompt_format import RAW
from tests.helpers.swarm_helpers import train_to_end

pytestmark = pytest.mark.usefixtures("one_torch_thread")

SMALL_EVAL = {"eval.tasks_per_family": 2, "eval.samples": 2, "tasks.families": ["arithmetic", "boolean"]}


def _cfg(model_dir: Path, run_dir: Path, **over):
    base = {"model.name": str(model_dir), "run.dir": str(run_dir), "run.progress": "off",
            "generation.prompts_per_step": 2, "generation.num_generations": 2,
            "generation.max_completion_length": 6, "train.steps": 5, "run.checkpoint_every": 0,
            "run.plot": False, **SMALL_EVAL}
    return load_config(None, {**base, **over})




# Only its prompt format is read before an evaluation runs (where answers are read).
_RAW_POLICY = SimpleNamespace(prompt_format=RAW)


def test_due_every_n_steps_and_at_the_end_but_not_when_stopping(tiny_model_dir, tmp_path):
    due = HeldOut(_cfg(tiny_model_dir, tmp_path, **{"eval.every": 2}), _RAW_POLICY, None).due
    assert [s for s in range(1, 6) if due(s, stopping=False)] == [2, 4, 5]
    assert not due(4, stopping=True) and not due(5, stopping=True)
    off = HeldOut(_cfg(tiny_model_dir, tmp_path, **{"eval.every": 0, "eval.at_end": False}), _RAW_POLICY, None)
    assert off.settings is None and not any(off.due(s, False) for s in range(1, 6))
    end_only = HeldOut(_cfg(tiny_model_dir, tmp_path, **{"eval.every": 0}), _RAW_POLICY, None).due
    assert [s for s in range(1, 6) if end_only(s, False)] == [5]


def test_a_run_evaluates_every_n_steps_and_at_the_end(warm_tiny_model_dir, tmp_path):
    run = tmp_path / "run"
    summary = train_to_end(_cfg(warm_tiny_model_dir, run, **{"eval.every": 2, "run.plot": True}))
    recs = read_metrics(run / "metrics.jsonl")
    assert [r["step"] for r in recs] == [1, 2, 3, 4, 5]  # one record per step: the evaluation rides in it
    assert [r["step"] for r in recs if "eval" in r] == [2, 4, 5]
    ev = recs[-1]["eval"]
    assert ev["n"] == 4 and set(ev["families"]) == {"arithmetic", "boolean"} and ev["seconds"] > 0
    for stats in (ev, *ev["families"].values()):
        assert 0 <= stats["greedy"] <= 1 and 0 <= stats["sampled"] <= 1
    status = json.loads((run / "status.json").read_text())
    assert status["eval"] == {"step": 5, **ev}
    assert summary["eval"] == {"step": 5, **ev}
    assert json.loads((run / "summary.json").read_text())["eval"]["families"] == ev["families"]
    # The end score: the mean of the evaluations after steps 2, 4 and 5 (the one before training is not one).
    evs = [r["eval"] for r in recs if "eval" in r]
    assert summary["eval_end"]["steps"] == [2, 4, 5]
    assert summary["eval_end"]["greedy"] == pytest.approx(sum(e["greedy"] for e in evs) / 3)
    assert summary["eval_end"]["sampled"] == pytest.approx(sum(e["sampled"] for e in evs) / 3)
    assert (run / "held_out.png").stat().st_size > 1000 and summary["plot_held_out"] == str(run / "held_out.png")


def test_the_evaluation_before_training_is_the_start_every_later_one_compares_with(warm_tiny_model_dir, tmp_path):
    """``eval.at_start``: evaluated once before step 1, into eval/step_0.json (not a metrics record:
    no step made it), read back first by ``evaluations``; a resumed run does not redo it, and a
    run that evaluates nothing makes none."""
    from swarm_node.node.observe.held_out import evaluations, start_eval

    run = tmp_path / "run"
    train_to_end(_cfg(warm_tiny_model_dir, run, **{"eval.every": 0, "train.steps": 2, "run.checkpoint_every": 1}))
    start = json.loads((run / "eval" / "step_0.json").read_text())
    assert start["step"] == 0 and start["n"] == 4 and 0 <= start["greedy"] <= 1 and set(start["families"]) == {
        "arithmetic", "boolean"}
    recs = read_metrics(run / "metrics.jsonl")
    assert [r["step"] for r in recs] == [1, 2] and [e["step"] for e in evaluations(recs, run)] == [0, 2]
    assert start_eval(run) == start
    before = (run / "eval" / "step_0.json").stat().st_mtime_ns
    train_to_end(_cfg(warm_tiny_model_dir, run, **{"eval.every": 0, "train.steps": 3, "run.resume": True}))
    assert (run / "eval" / "step_0.json").stat().st_mtime_ns == before  # resumed at step 2: not redone
    quiet = tmp_path / "quiet"
    train_to_end(_cfg(warm_tiny_model_dir, quiet, **{"eval.every": 0, "eval.at_end": False, "train.steps": 1}))
    assert not (quiet / "eval").exists()
    # A run starting in a folder an earlier run left its start in (no checkpoint kept): not this run's.
    again = tmp_path / "again"
    (again / "eval").mkdir(parents=True)
    (again / "eval" / "step_0.json").write_text(json.dumps(start))
    train_to_end(_cfg(warm_tiny_model_dir, again, **{"eval.at_start": False, "train.steps": 1}))
    assert start_eval(again) is None and [e["step"] for e in evaluations(read_metrics(again / "metrics.jsonl"), again)] == [1]


def test_evaluating_does_not_change_what_the_node_trains(warm_tiny_model_dir, tmp_path):
    on, off = tmp_path / "on", tmp_path / "off"
    train_to_end(_cfg(warm_tiny_model_dir, on, **{"eval.every": 1, "train.steps": 3}))
    train_to_end(_cfg(warm_tiny_model_dir, off, **{"eval.every": 0, "eval.at_end": False, "train.steps": 3}))
    ra, rb = read_metrics(on / "metrics.jsonl"), read_metrics(off / "metrics.jsonl")
    assert all("eval" in r for r in ra) and not any("eval" in r for r in rb)
    assert [(r["reward"], r["loss"]) for r in ra] == [(r["reward"], r["loss"]) for r in rb]
    latest = (on / "checkpoints" / "latest").read_text().strip()
    a = load_file(on / "checkpoints" / latest / "model.safetensors")
    b = load_file(off / "checkpoints" / latest / "model.safetensors")
    assert all(torch.equal(a[k], b[k]) for k in a)


def test_a_failed_evaluation_is_logged_and_training_keeps_its_records_and_checkpoints(
        warm_tiny_model_dir, tmp_path, monkeypatch, caplog):
    """An evaluation that raises (out of memory on a GPU, say) costs only that evaluation: the
    step's record (with ``eval_error``), the periodic checkpoint due at the same step and the rest
    of the run go on."""
    import swarm_node.node.evaluate.evaluate as evaluate_module

    def out_of_memory(*args, **kwargs):
        raise RuntimeError("CUDA out of memory (simulated)")

    monkeypatch.setattr(evaluate_module, "evaluate", out_of_memory)
    run = tmp_path / "run"
    summary = train_to_end(_cfg(warm_tiny_model_dir, run, **{"eval.every": 2, "run.checkpoint_every": 2}))
    recs = read_metrics(run / "metrics.jsonl")
    assert [r["step"] for r in recs] == [1, 2, 3, 4, 5] and summary["steps"] == 5
    assert [r["step"] for r in recs if "eval_error" in r] == [2, 4, 5] and not any("eval" in r for r in recs)
    assert recs[1]["eval_error"] == "RuntimeError: CUDA out of memory (simulated)"
    assert {"step_000002", "step_000004", "step_000005"} <= {p.name for p in (run / "checkpoints").glob("step_*")}
    assert "held-out evaluation after step 2 failed" in caplog.text
    assert "held-out evaluation before training failed" in caplog.text and not (run / "eval").exists()


@pytest.mark.parametrize("greedy", [True, False], ids=["greedy", "sampled"])
def test_a_stop_during_an_evaluation_ends_it_and_the_summary_says_stopped_early(tiny_model_dir, tmp_path,
                                                                                 monkeypatch, caplog, greedy):
    """Ctrl-C during the final evaluation waited it out (90 s on a real model) and the summary said
    ``stopped_early: false``. Here the stop is requested from inside the evaluation's first
    generate call: that call ends at its next token, nothing is recorded, the run is stopped early."""
    import asyncio
    import threading

    from swarm_node.node.run.trainer import TrainingNode
    from swarm_node.policies.policy import Policy

    run = tmp_path / "run"
    cfg = _cfg(tiny_model_dir, run, **{"train.steps": 1, "eval.every": 0, "eval.at_start": False,
                                       "eval.greedy": greedy, "eval.max_completion_length": 64})
    asked = threading.Event()

    async def scenario():
        node = await TrainingNode.create(cfg)
        loop, real = asyncio.get_running_loop(), node.policy.model.generate
        calls = []

        def stop_then_generate(*args, **kwargs):  # in the evaluation's worker thread
            calls.append(len(calls))
            if json.loads((run / "status.json").read_text())["phase"] == "evaluating" and not asked.is_set():
                asked.set()
                loop.call_soon_threadsafe(node.request_stop)
                while not node.stop_requested:  # the request reaches the node before this call runs
                    threading.Event().wait(0.01)
            return real(*args, **kwargs)

        monkeypatch.setattr(node.policy.model, "generate", stop_then_generate)
        monkeypatch.setattr(Policy, "sampling_model", lambda self: self.model)
        try:
            return await node.run(handle_signals=False)
        finally:
            await node.close()

    with caplog.at_level("WARNING"):
        summary = asyncio.run(scenario())
    assert asked.is_set() and summary["stopped_early"] is True and summary["steps"] == 1
    assert "held-out evaluation after step 1 stopped by request: not recorded" in caplog.text
    recs = read_metrics(run / "metrics.jsonl")
    assert [r["step"] for r in recs] == [1] and "eval" not in recs[0]
    assert not (run / "eval" / "step_1.json").exists()


def test_a_final_evaluation_skipped_for_a_stop_is_said_and_counts_as_stopped_early(tiny_model_dir, tmp_path,
                                                                                    caplog):
    import asyncio

    held = HeldOut(_cfg(tiny_model_dir, tmp_path, **{"eval.every": 0}), _RAW_POLICY, None)
    with caplog.at_level("WARNING"):
        asyncio.run(held.after_step(5, {}, stopping=True))  # the last step (train.steps 5), a stop asked
    assert held.cut_short and "held-out evaluation after step 5 skipped: the node is stopping" in caplog.text
    quiet = HeldOut(_cfg(tiny_model_dir, tmp_path, **{"eval.every": 0}), _RAW_POLICY, None)
    asyncio.run(quiet.after_step(3, {}, stopping=True))  # nothing was due: nothing skipped
    assert not quiet.cut_short
