"""The logging tools beside metrics.jsonl: which numbers become curves (by hand), TensorBoard event
files read back with tensorboard's own reader (a real run, a resumed one), a W&B offline run, a
sink that fails mid-run (training and metrics.jsonl go on) and a missing package (refused before
the model loads)."""

from __future__ import annotations

import json
import logging
import math
from pathlib import Path

import pytest

from swarm_node.node.errors import ConfigError
from swarm_node.node.observe.metrics import MetricsWriter, read_metrics
from swarm_node.node.observe.record_sinks import RecordLog, check_sinks_available, scalars
from swarm_node.node.config.config import load_config
from tests.helpers.swarm_helpers import train_to_end

pytestmark = pytest.mark.usefixtures("one_torch_thread")


def test_scalars_are_the_records_numbers_and_its_held_out_scores_by_family():
    record = {"step": 7, "time": 1.5e9, "reward": 0.25, "ess": 12, "skipped": True, "lr": float("nan"),
              "ext_pos_weight_mean": None, "external_by_peer": {"sn1abc": 3}, "note": "x", "gen_batch": 64,
              "eval": {"greedy": 0.5, "sampled": 0.25, "n": 8, "k": 4, "pass_at_k": 0.75, "seconds": 2.0,
                       "families": {"counting": {"greedy": 1.0, "sampled": None, "n": 4}}}}
    assert scalars(record) == {
        "train/reward": 0.25, "train/ess": 12.0, "train/gen_batch": 64.0,
        "held_out/greedy": 0.5, "held_out/sampled": 0.25, "held_out/pass_at_k": 0.75, "held_out/seconds": 2.0,
        "held_out/counting/greedy": 1.0}
    assert scalars({"step": 1}) == {}


def _cfg(model_dir: Path, run: Path, **over):
    return load_config(None, {"model.name": str(model_dir), "run.dir": str(run), "run.progress": "off",
                              "run.plot": False, "generation.prompts_per_step": 2, "generation.num_generations": 4,
                              "generation.max_completion_length": 8, "tasks.difficulties": [1],
                              "train.steps": 4, "run.checkpoint_every": 2, "eval.every": 2,
                              "eval.tasks_per_family": 2, "eval.samples": 1, "run.tensorboard": True, **over})


def _tb(run: Path) -> dict[str, list[tuple[int, float]]]:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    acc = EventAccumulator(str(run / "tensorboard"), size_guidance={"scalars": 0})
    acc.Reload()
    return {tag: [(e.step, e.value) for e in acc.Scalars(tag)] for tag in acc.Tags()["scalars"]}


def _same(curve: list[tuple[int, float]], want: list[tuple[int, float]]) -> bool:
    # event files hold float32
    return [s for s, _ in curve] == [s for s, _ in want] and all(
        math.isclose(a, b, rel_tol=1e-6, abs_tol=1e-7) for (_, a), (_, b) in zip(curve, want))


def test_tensorboard_has_every_records_curves_and_the_held_out_ones_from_step_0(warm_tiny_model_dir, tmp_path):
    run = tmp_path / "run"
    train_to_end(_cfg(warm_tiny_model_dir, run))
    records = read_metrics(run / "metrics.jsonl")
    curves = _tb(run)
    for key in ("reward", "correct", "ess", "rho", "lr_factor", "loss", "grad_norm"):
        assert _same(curves[f"train/{key}"], [(r["step"], r[key]) for r in records]), key
    start = json.loads((run / "eval" / "step_0.json").read_text())
    evals = [(0, start["greedy"])] + [(r["step"], r["eval"]["greedy"]) for r in records if "eval" in r]
    assert [s for s, _ in evals] == [0, 2, 4] and _same(curves["held_out/greedy"], evals)
    for fam in ("arithmetic", "lists", "base", "boolean", "counting"):
        assert [s for s, _ in curves[f"held_out/{fam}/greedy"]] == [0, 2, 4]
    assert not any(t.startswith("train/external_by_peer") for t in curves)


def test_a_resumed_run_shows_one_history_in_tensorboard(warm_tiny_model_dir, tmp_path):
    run = tmp_path / "run"
    train_to_end(_cfg(warm_tiny_model_dir, run))
    # As if the node died after writing step 4 but before its checkpoint: the resume restarts from
    # step 2's, and the events of steps 3 and 4 written before the stop are not a second history.
    import shutil

    shutil.rmtree(run / "checkpoints" / "step_000004")
    train_to_end(_cfg(warm_tiny_model_dir, run, **{"run.resume": True, "train.steps": 5}))
    records = read_metrics(run / "metrics.jsonl")
    assert [r["step"] for r in records] == [1, 2, 3, 4, 5]
    assert len(list((run / "tensorboard").glob("events.out.tfevents.*"))) == 2
    assert _same(_tb(run)["train/reward"], [(r["step"], r["reward"]) for r in records])


class _Breaks:
    name = "Broken"

    def __init__(self, after: int):
        self.after, self.written, self.closed = after, [], False

    def write(self, step, values, walltime):
        if step > self.after:
            raise OSError(28, "No space left on device")
        self.written.append(step)

    def close(self):
        self.closed = True


def test_a_sink_that_fails_is_said_once_and_dropped_and_metrics_jsonl_goes_on(tmp_path, caplog):
    broken = _Breaks(after=2)
    log = RecordLog(MetricsWriter(tmp_path / "metrics.jsonl"), [broken])
    with caplog.at_level(logging.WARNING, logger="swarm_node.node.observe.record_sinks"):
        for step in range(1, 6):
            log.write({"step": step, "reward": step / 10})
    log.close()
    assert broken.written == [1, 2] and broken.closed and log.sinks == []
    assert [r["step"] for r in read_metrics(tmp_path / "metrics.jsonl")] == [1, 2, 3, 4, 5]
    said = [r.getMessage() for r in caplog.records]
    assert len(said) == 1 and "Broken logging failed at step 3" in said[0] and "No space left" in said[0]


def test_a_sink_whose_package_is_missing_is_refused_before_the_model_loads(tmp_path, monkeypatch):
    import swarm_node.node.observe.record_sinks as sinks

    monkeypatch.setattr(sinks, "find_spec", lambda name: None)
    with pytest.raises(ConfigError, match=r"pip install 'swarm-node\[tensorboard\]'"):
        check_sinks_available(True, "off")
    with pytest.raises(ConfigError, match=r"run.wandb offline needs the wandb package"):
        check_sinks_available(False, "offline")
    check_sinks_available(False, "off")
    # A node refuses it before loading anything: the missing model folder is never reached.
    import asyncio

    from swarm_node.node.run.trainer import TrainingNode

    cfg = load_config(None, {"model.name": str(tmp_path / "no-model"), "run.dir": str(tmp_path / "run"),
                             "run.tensorboard": True})
    with pytest.raises(ConfigError, match="tensorboard package"):
        asyncio.run(TrainingNode.create(cfg))
    assert not (tmp_path / "run").exists()


@pytest.mark.subprocess  # wandb runs its own service process (wandb-core)
def test_wandb_offline_logs_the_same_records_with_no_account_and_resumes_the_same_run(warm_tiny_model_dir, tmp_path,
                                                                                       monkeypatch):
    monkeypatch.setenv("WANDB_API_KEY", "")  # no account: offline must not need one
    monkeypatch.setenv("WANDB_DIR", str(tmp_path / "elsewhere"))  # the run folder wins over a user's setting
    run = tmp_path / "run"
    over = {"run.tensorboard": False, "run.wandb": "offline", "run.wandb_project": "test-project"}
    train_to_end(_cfg(warm_tiny_model_dir, run, **over))
    run_id = (run / "wandb" / "swarm_node_run_id").read_text()
    [offline] = list((run / "wandb").glob(f"offline-run-*-{run_id}"))
    data = (offline / f"run-{run_id}.wandb").read_bytes()
    records = read_metrics(run / "metrics.jsonl")
    # W&B's log stores each value as JSON text beside its key: the values are the records' own.
    for r in records:
        assert json.dumps(r["reward"]).encode() in data
    assert b"train/reward" in data and b"held_out/greedy" in data and b"test-project" in data
    train_to_end(_cfg(warm_tiny_model_dir, run, **{**over, "run.resume": True, "train.steps": 6}))
    assert (run / "wandb" / "swarm_node_run_id").read_text() == run_id  # the same W&B run goes on
    later = read_metrics(run / "metrics.jsonl")[4:]
    assert [r["step"] for r in later] == [5, 6]
    resumed = b"".join(p.read_bytes() for p in (run / "wandb").glob(f"offline-run-*-{run_id}/run-{run_id}.wandb"))
    assert all(json.dumps(r["reward"]).encode() in resumed for r in later)
    assert not (tmp_path / "elsewhere").exists() or not list((tmp_path / "elsewhere").rglob("*.wandb"))
