"""Tests of node.checkpoint.checkpoint's atomic writes: a crash or a SIGKILL mid-save never exposes a
partial checkpoint, and what a killed save leaves behind is restored or cleaned."""

import os
import random
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

import swarm_node.node.checkpoint.checkpoint as ckpt
import swarm_node.node.checkpoint.checkpoint_format as ckpt_format
from swarm_node.node.checkpoint.checkpoint import list_checkpoints, load_checkpoint, load_latest, save_checkpoint
from swarm_node.node.checkpoint.checkpoint_format import CheckpointState
from swarm_node.node.errors import CheckpointError

from tests.helpers.paths import ROOT as REPO_ROOT
from tests.node.checkpoint.test_checkpoint import _sidecars, _small_state


def _dead_pid() -> int:
    proc = subprocess.Popen(["true"])
    proc.wait()
    return proc.pid


@pytest.mark.parametrize("target", ["_write_json", "os.replace"])
def test_crash_mid_write_leaves_previous_checkpoint_usable(tmp_path, monkeypatch, target):
    save_checkpoint(tmp_path, _small_state(1)[0])

    def boom(*args, **kwargs):
        raise OSError("simulated crash")

    if target == "os.replace":
        monkeypatch.setattr(ckpt.os, "replace", boom)
    else:  # the manifest writer of node/checkpoint/checkpoint_format.py
        monkeypatch.setattr(ckpt_format, target, boom)
    with pytest.raises(OSError, match="simulated crash"):
        save_checkpoint(tmp_path, _small_state(2)[0])
    monkeypatch.undo()
    assert not (tmp_path / "step_000002").exists()
    assert list_checkpoints(tmp_path) == [tmp_path / "step_000001"]
    assert _sidecars(tmp_path) == []
    assert load_latest(tmp_path)[0].step == 1


def test_failed_resave_puts_the_old_copy_back(tmp_path, monkeypatch):
    first, model = _small_state(1, seed=0)
    save_checkpoint(tmp_path, first)
    real_replace = os.replace

    def replace(src, dst):
        if ".tmp-" in Path(src).name:  # only the final rename of the new copy fails
            raise OSError("simulated crash")
        real_replace(src, dst)

    monkeypatch.setattr(ckpt.os, "replace", replace)
    with pytest.raises(OSError, match="simulated crash"):
        save_checkpoint(tmp_path, _small_state(1, seed=5)[0])
    monkeypatch.undo()
    assert _sidecars(tmp_path) == [] and list_checkpoints(tmp_path) == [tmp_path / "step_000001"]
    loaded = load_checkpoint(tmp_path / "step_000001")
    assert all(torch.equal(loaded.model_state[k], v) for k, v in model.state_dict().items())


@pytest.mark.subprocess  # tests/helpers/process_guard.py
def test_leftovers_of_a_killed_process_are_ignored_then_cleaned(tmp_path):
    save_checkpoint(tmp_path, _small_state(1)[0])
    pid = _dead_pid()
    partial = tmp_path / f"step_000002.tmp-{pid}"
    partial.mkdir()
    (partial / "model.safetensors").write_bytes(b"\0" * 100)
    (tmp_path / f"step_000001.del-{pid}").mkdir()
    (tmp_path / f"latest.tmp-{pid}").write_text("step_000002")
    assert list_checkpoints(tmp_path) == [tmp_path / "step_000001"]
    assert load_latest(tmp_path)[1] == tmp_path / "step_000001"
    save_checkpoint(tmp_path, _small_state(3)[0])
    assert _sidecars(tmp_path) == []
    assert (tmp_path / "latest").read_text().strip() == "step_000003"


@pytest.mark.subprocess  # tests/helpers/process_guard.py
def test_old_copy_moved_aside_before_a_kill_is_restored(tmp_path):
    path = save_checkpoint(tmp_path, _small_state(1)[0])
    os.replace(path, tmp_path / f"step_000001.old-{_dead_pid()}")  # killed before the new one landed
    save_checkpoint(tmp_path, _small_state(2)[0])
    assert list_checkpoints(tmp_path) == [tmp_path / "step_000001", tmp_path / "step_000002"]
    assert load_checkpoint(tmp_path / "step_000001").step == 1


@pytest.mark.subprocess  # tests/helpers/process_guard.py
def test_resume_finds_an_old_copy_moved_aside_by_a_killed_resave(tmp_path):
    save_checkpoint(tmp_path, _small_state(1)[0])
    path = save_checkpoint(tmp_path, _small_state(2)[0])
    os.replace(path, tmp_path / f"step_000002.old-{_dead_pid()}")  # killed mid re-save of step 2
    state, found = load_latest(tmp_path)
    assert found == tmp_path / "step_000002" and state.step == 2


def test_unserializable_extra_fails_before_writing(tmp_path):
    state = CheckpointState(1, 0, {"w": torch.zeros(1)}, extra={"bad": object()})
    with pytest.raises(CheckpointError, match="JSON-serializable"):
        save_checkpoint(tmp_path, state)
    assert list(tmp_path.iterdir()) == []


_WRITER = r"""
import sys, torch
from pathlib import Path
from swarm_node.node.checkpoint.checkpoint import save_checkpoint
from swarm_node.node.checkpoint.checkpoint_format import CheckpointState, capture_rng
root, step = Path(sys.argv[1]), 0
model = {f"w{i}": torch.randn(256, 1024) for i in range(4)}  # 4 MiB of weights
while True:
    step += 1
    model["step"] = torch.tensor([step])  # lets the test check files come from one save
    opt = {"state": {0: {"step": torch.tensor(float(step)), "exp_avg": model["w0"] * step}},
           "param_groups": [{"lr": 1e-3, "betas": (0.9, 0.99), "params": [0]}]}
    state = CheckpointState(step, step, model, opt, capture_rng(), {"step": step})
    for _ in range(1 + (step % 3 == 0)):  # every third step is re-saved: the move-aside path
        save_checkpoint(root, state, keep_last=2)
"""


@pytest.mark.subprocess  # tests/helpers/process_guard.py
def test_sigkill_mid_checkpoint_never_exposes_a_partial_checkpoint(tmp_path):
    delays = [0.0, 0.07, 0.19, 0.41]
    random.Random(os.getpid()).shuffle(delays)  # kill points vary run to run anyway (timing)
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT)}
    roots = [tmp_path / f"run{i}" / "checkpoints" for i in range(len(delays))]
    procs = [subprocess.Popen([sys.executable, "-c", _WRITER, str(r)], cwd=REPO_ROOT, env=env)
             for r in roots]
    ready: dict[int, float] = {}
    deadline = time.monotonic() + 60
    try:
        while len(ready) < len(procs) or any(p.poll() is None for p in procs):
            assert time.monotonic() < deadline, "writers never produced a checkpoint"
            for i, (proc, root) in enumerate(zip(procs, roots)):
                assert proc.poll() in (None, -signal.SIGKILL), f"writer {i} died: {proc.returncode}"
                if i not in ready and (root / "latest").exists():
                    ready[i] = time.monotonic()
                if i in ready and proc.poll() is None and time.monotonic() - ready[i] >= delays[i]:
                    proc.send_signal(signal.SIGKILL)
                    proc.wait()  # reaped, so its pid counts as dead for the cleanup
            time.sleep(0.005)
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    for root in roots:
        finals = sorted(p for p in root.iterdir() if re.fullmatch(r"step_\d+", p.name))
        assert finals and finals == list_checkpoints(root)
        for path in finals:  # every visible step dir is complete and self-consistent
            state = load_checkpoint(path)
            assert int(state.model_state["step"]) == state.step == state.extra["step"]
        state, path = load_latest(root)
        assert path == finals[-1]
        new = save_checkpoint(root, CheckpointState(state.step + 1, 0, {"w": torch.ones(1)}), 2)
        assert _sidecars(root) == [] and list_checkpoints(root)[-1] == new
