"""The solo round loop end to end on a tiny local model: metrics, plots, checkpoints, exact resume,
Ctrl-C, corrupt checkpoints, and off-policy staleness showing up in ESS and the LR factor."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from swarm_node.node.config.config import load_config
from swarm_node.node.errors import ConfigError
from swarm_node.node.observe.metrics import read_metrics
from swarm_node.node.run.trainer import TrainingNode
from tests.helpers.swarm_helpers import train_to_end

from tests.helpers.paths import ROOT


def _cfg(model_dir: Path, run_dir: Path, **over):
    base = {
        "model.name": str(model_dir),
        "run.dir": str(run_dir),
        "run.progress": "off",
        "generation.prompts_per_step": 4,
        "generation.num_generations": 4,
        "generation.max_completion_length": 8,
        "learner.learning_rate": 3e-3,
        "tasks.difficulties": [1],
        "train.steps": 6,
        "run.checkpoint_every": 0,
        "run.plot": False,
        "eval.at_start": False,  # held-out evaluation has its own tests (test_held_out_run.py)
    }
    base.update(over)
    return load_config(None, base)




def _final_weights(run_dir: Path) -> dict[str, torch.Tensor]:
    latest = (run_dir / "checkpoints" / "latest").read_text().strip()
    return load_file(run_dir / "checkpoints" / latest / "model.safetensors")


def test_run_writes_metrics_plot_summary_and_checkpoint(warm_tiny_model_dir, tmp_path):
    summary = train_to_end(_cfg(warm_tiny_model_dir, tmp_path / "run", **{"run.plot": True}))
    recs = read_metrics(tmp_path / "run" / "metrics.jsonl")
    assert [r["step"] for r in recs] == [1, 2, 3, 4, 5, 6]
    for key in ("reward", "correct", "ess", "rho", "lr_factor", "lr", "loss", "tokens_per_s", "policy_version"):
        assert key in recs[0], key
    assert recs[-1]["policy_version"] == 6
    assert recs[0]["rho"] == pytest.approx(1.0, abs=1e-3)  # on-policy: every weight ≈ 1
    assert (tmp_path / "run" / "reward_curve.png").stat().st_size > 1000
    assert json.loads((tmp_path / "run" / "summary.json").read_text())["steps"] == 6
    assert summary["steps"] == 6
    assert (tmp_path / "run" / "checkpoints" / "step_000006" / "MANIFEST.json").exists()
    assert json.loads((tmp_path / "run" / "config.json").read_text())["train"]["steps"] == 6


def test_resume_continues_exactly(warm_tiny_model_dir, tmp_path):
    straight = tmp_path / "straight"
    train_to_end(_cfg(warm_tiny_model_dir, straight))
    split = tmp_path / "split"
    train_to_end(_cfg(warm_tiny_model_dir, split, **{"train.steps": 3}))
    train_to_end(_cfg(warm_tiny_model_dir, split, **{"run.resume": True}))
    a, b = _final_weights(straight), _final_weights(split)
    assert a.keys() == b.keys()
    for k in a:
        assert torch.equal(a[k], b[k]), k
    ra, rb = read_metrics(straight / "metrics.jsonl"), read_metrics(split / "metrics.jsonl")
    assert [r["step"] for r in rb] == [1, 2, 3, 4, 5, 6]
    for x, y in zip(ra, rb):
        assert (x["reward"], x["loss"], x["rho"]) == (y["reward"], y["loss"], y["rho"])


def test_existing_run_without_resume_is_refused(warm_tiny_model_dir, tmp_path):
    train_to_end(_cfg(warm_tiny_model_dir, tmp_path / "run", **{"train.steps": 2}))
    with pytest.raises(ConfigError, match="resume"):
        train_to_end(_cfg(warm_tiny_model_dir, tmp_path / "run", **{"train.steps": 2}))


def test_corrupt_latest_checkpoint_falls_back_to_previous(warm_tiny_model_dir, tmp_path, caplog):
    run = tmp_path / "run"
    train_to_end(_cfg(warm_tiny_model_dir, run, **{"train.steps": 4, "run.checkpoint_every": 2}))
    model_file = run / "checkpoints" / "step_000004" / "model.safetensors"
    model_file.write_bytes(model_file.read_bytes()[:100])  # truncated, as by a full disk
    with caplog.at_level("WARNING"):
        summary = train_to_end(_cfg(warm_tiny_model_dir, run, **{"train.steps": 5, "run.resume": True}))
    assert "step_000004" in caplog.text and "truncated" in caplog.text
    recs = read_metrics(run / "metrics.jsonl")
    assert [r["step"] for r in recs] == [1, 2, 3, 4, 5]  # steps 3-4 redone from the step-2 checkpoint
    assert summary["steps"] == 5


def _training_process(model_dir: Path, run: Path, steps_done: int, *flags: str) -> subprocess.Popen:
    """``swarm-node train`` in a process of its own (a long run of tiny steps), once it has
    recorded ``steps_done`` steps."""
    args = [sys.executable, "-m", "swarm_node.node.cli", "train", "--model.name", str(model_dir),
            "--run.dir", str(run), "--run.progress", "plain", "--train.steps", "100000",
            "--generation.prompts_per_step", "2", "--generation.num_generations", "2",
            "--generation.max_completion_length", "6", *flags]
    proc = subprocess.Popen(args, cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)}, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 120
    try:
        while len(read_metrics(run / "metrics.jsonl")) < steps_done:
            assert proc.poll() is None, proc.communicate()
            assert time.monotonic() < deadline, "training never started"
            time.sleep(0.1)
    except BaseException:
        proc.kill()
        raise
    return proc


@pytest.mark.subprocess  # tests/helpers/process_guard.py
def test_sigint_stops_cleanly_with_a_checkpoint_and_resumes(warm_tiny_model_dir, tmp_path):
    run = tmp_path / "run"
    proc = _training_process(warm_tiny_model_dir, run, 3, "--run.plot", "false")
    try:
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 130, err
    assert "stop requested" in err
    steps = len(read_metrics(run / "metrics.jsonl"))
    latest = (run / "checkpoints" / "latest").read_text().strip()
    assert latest == f"step_{steps:06d}"  # the checkpoint holds exactly the steps in the metrics
    assert not list((run / "checkpoints").glob("*.tmp-*"))
    summary = train_to_end(_cfg(warm_tiny_model_dir, run, **{
        "train.steps": steps + 2, "run.resume": True, "generation.prompts_per_step": 2,
        "generation.num_generations": 2, "generation.max_completion_length": 6,
        "learner.learning_rate": 3e-4}))
    assert summary["steps"] == steps + 2


@pytest.mark.subprocess  # tests/helpers/process_guard.py
def test_two_ctrl_c_in_quick_succession_still_write_the_summary_and_the_final_status(warm_tiny_model_dir, tmp_path):
    """The second Ctrl-C came after the loop had taken its handlers off: Python's KeyboardInterrupt
    ended the process without summary.json or plots, status.json left at "stopping"."""
    run = tmp_path / "run"
    proc = _training_process(warm_tiny_model_dir, run, 2, "--run.plot", "true", "--eval.every", "0",
                             "--eval.at_start", "false")
    try:
        proc.send_signal(signal.SIGINT)
        deadline = time.monotonic() + 120
        # The second once the loop is over (the final checkpoint, summary and plots): where it
        # used to land after the handlers were gone.
        status = run / "status.json"
        while proc.poll() is None and json.loads(status.read_text())["phase"] not in ("stopping", "finishing",
                                                                                      "stopped"):
            assert time.monotonic() < deadline, "the node never began to stop"
            time.sleep(0.01)
        if proc.poll() is None:
            proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 130, err[-3000:]
    assert "Traceback" not in err and "KeyboardInterrupt" not in err, err[-3000:]
    summary = json.loads((run / "summary.json").read_text())
    assert summary["stopped_early"] is True and (run / "reward_curve.png").exists()
    assert json.loads((run / "status.json").read_text())["phase"] == "stopped"


def test_staler_behaviour_policy_lowers_ess_and_lr_factor(warm_tiny_model_dir, tmp_path):
    """Rollouts from a copy of the policy k updates old: the batch's ESS/B falls with k; the LR
    follows ρ over the rows that carry gradient only, so a step without any keeps factor 1."""
    late = {}
    for k in (0, 4, 16):
        run = tmp_path / f"lag{k}"
        train_to_end(_cfg(warm_tiny_model_dir, run, **{"train.steps": 24, "train.behaviour_lag": k,
                                                  "learner.learning_rate": 1e-2,
                                                  "learner.max_off_policy_steps": 32}))
        recs = read_metrics(run / "metrics.jsonl")
        tail = recs[-6:]  # by step 18 the lag-16 copy is a full 16 updates behind
        assert all(r["staleness"] == min(k, r["step"] - 1) for r in recs)
        # A step whose groups all agree runs no pass (policies/inert_rows.py): it has no ESS to read.
        seen = [r["rho_all_rows"] for r in tail if r["rho_all_rows"] is not None]
        assert len(seen) >= 3, tail
        late[k] = sum(seen) / len(seen)
        for r in recs:
            assert 0 < r["rho"] <= 1 and (r["rho_all_rows"] is None or r["rho_all_rows"] <= 1 + 1e-9)
            if r["grad_rows"] == 0:  # nothing to correct: neither ρ nor the LR moves
                assert r["rho"] == 1.0 and r["lr_factor"] == 1.0
    assert late[0] == pytest.approx(1.0, abs=1e-3)
    assert late[0] > late[4] > late[16]


def test_staleness_bound_drops_old_rollouts(warm_tiny_model_dir, tmp_path):
    run = tmp_path / "run"
    train_to_end(_cfg(warm_tiny_model_dir, run, **{"train.steps": 6, "train.behaviour_lag": 4,
                                              "learner.max_off_policy_steps": 2}))
    recs = read_metrics(run / "metrics.jsonl")
    # Staleness 0, 1, 2 train; at steps 4-5 the sampler is 3 versions behind: everything is
    # dropped and the policy stays at v3, so by step 6 the sampler (v1) is back within the bound.
    assert [r["dropped_stale"] for r in recs] == [0, 0, 0, 16, 16, 0]
    assert [r["policy_version"] for r in recs] == [1, 2, 3, 3, 3, 4]
    assert "loss" not in recs[3] and "loss" in recs[5]


def test_resume_applies_this_runs_weight_decay(warm_tiny_model_dir, tmp_path):
    run = tmp_path / "run"
    train_to_end(_cfg(warm_tiny_model_dir, run, **{"train.steps": 2}))

    async def reopen():
        node = await TrainingNode.create(_cfg(warm_tiny_model_dir, run, **{
            "train.steps": 3, "run.resume": True, "learner.weight_decay": 0.1}))
        try:
            return [g["weight_decay"] for g in node.learner.optimizer.param_groups], node.step
        finally:
            await node.close()

    decays, step = asyncio.run(reopen())
    assert step == 2 and decays == [0.1]  # not the 0.0 saved in the checkpoint's param groups


def test_lora_run_checkpoints_and_resumes_exactly(warm_tiny_model_dir, tmp_path):
    lora = {"model.lora_rank": 4, "train.steps": 4}
    straight, split = tmp_path / "straight", tmp_path / "split"
    train_to_end(_cfg(warm_tiny_model_dir, straight, **lora))
    train_to_end(_cfg(warm_tiny_model_dir, split, **{**lora, "train.steps": 2}))
    train_to_end(_cfg(warm_tiny_model_dir, split, **{**lora, "run.resume": True}))
    a, b = _final_weights(straight), _final_weights(split)
    # The checkpoint holds the adapter only: the frozen base is read from model.name again.
    assert a and all("lora_" in k for k in a), sorted(a)[:5]
    full = load_file(warm_tiny_model_dir / "model.safetensors")
    assert sum(t.numel() for t in a.values()) < 0.5 * sum(t.numel() for t in full.values())
    for k in a:
        assert torch.equal(a[k], b[k]), k


def test_lora_resume_on_other_base_weights_is_refused(warm_tiny_model_dir, tmp_path):
    """Same architecture, other weights (a fine-tune of the same model, say): an adapter trained
    on one base would load into the other without a word, so resume refuses it."""
    import shutil

    from safetensors.torch import save_file

    from swarm_node.node.errors import CheckpointError

    other = tmp_path / "other-base"
    shutil.copytree(warm_tiny_model_dir, other)
    weights = load_file(other / "model.safetensors")
    save_file({k: v + 0.01 for k, v in weights.items()}, str(other / "model.safetensors"), metadata={"format": "pt"})
    lora = {"model.lora_rank": 4, "train.steps": 2}
    train_to_end(_cfg(warm_tiny_model_dir, tmp_path / "run", **lora))
    with pytest.raises(CheckpointError, match="LoRA adapter trained on other base weights"):
        train_to_end(_cfg(other, tmp_path / "run", **{**lora, "train.steps": 3, "run.resume": True}))
    # Another alpha is not a tensor: the adapter would load and scale its update differently.
    with pytest.raises(ConfigError, match="--model.lora_alpha 16, this run asks for 64"):
        train_to_end(_cfg(warm_tiny_model_dir, tmp_path / "run", **{**lora, "train.steps": 3, "run.resume": True,
                                                             "model.lora_alpha": 64}))


def test_out_of_memory_in_a_step_is_recovered_and_recorded(warm_tiny_model_dir, tmp_path, monkeypatch):
    """CUDA's out-of-memory error, injected into generation (over 8 rows) and the learner's
    forward pass (over 4 rows) of a 16-completion step: the step is retried at half the rows
    until it fits, the run goes on at that size, and metrics and status.json say so."""
    from swarm_node.policies.policy import Policy

    real_sample, real_logp = Policy._sample, Policy.completion_logprobs

    def sample(self, rows, params):
        if len(rows) > 8:
            raise torch.OutOfMemoryError("CUDA out of memory (injected into generation)")
        return real_sample(self, rows, params)

    def logprobs(self, batch, temperature=1.0):
        if len(batch) > 4:
            raise torch.OutOfMemoryError("CUDA out of memory (injected into the learner)")
        return real_logp(self, batch, temperature)

    monkeypatch.setattr(Policy, "_sample", sample)
    monkeypatch.setattr(Policy, "completion_logprobs", logprobs)
    # The whole batch in the learner's passes (rows of all-equal groups would be left out:
    # policies/inert_rows.py), so the halvings are the batch's, not what its rewards allow.
    import swarm_node.policies.learner as learner_mod

    monkeypatch.setattr(learner_mod, "skippable", lambda *a: False)
    run = tmp_path / "run"
    train_to_end(_cfg(warm_tiny_model_dir, run, **{"train.steps": 3}))
    recs = read_metrics(run / "metrics.jsonl")
    assert [(r["gen_oom_halvings"], r["gen_batch"]) for r in recs] == [(1, 8), (0, 8), (0, 8)]
    assert [(r["oom_halvings"], r["micro_batch"]) for r in recs] == [(2, 4), (0, 4), (0, 4)]
    assert all(r["batch_size"] == 16 for r in recs) and recs[-1]["policy_version"] == 3
    memory = json.loads((run / "status.json").read_text())["memory"]
    assert memory == {"micro_batch_size": 4, "generation_batch_size": 8,
                      "learner_oom_halvings": 2, "generation_oom_halvings": 1}


def test_generation_batch_size_applies_to_the_lagged_sampler(warm_tiny_model_dir, tmp_path, monkeypatch):
    from swarm_node.policies.policy import Policy

    real, rows = Policy._sample, []

    def sample(self, todo, params):
        rows.append(len(todo))
        return real(self, todo, params)

    monkeypatch.setattr(Policy, "_sample", sample)
    run = tmp_path / "run"
    train_to_end(_cfg(warm_tiny_model_dir, run, **{"train.steps": 2, "train.behaviour_lag": 1,
                                            "generation.batch_size": 4}))
    assert rows and set(rows) == {4}  # 16 completions a step, 4 a call, by the lagged copy too
    assert [r["gen_batch"] for r in read_metrics(run / "metrics.jsonl")] == [4, 4]
