"""One process per run folder (node/run/run_lock.py): a second `swarm-node train` on a folder in
use stops at once, naming the process that has it, and writes nothing there; a folder whose owner
was killed is free again; a node that closed leaves it free."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from swarm_node.node.errors import ConfigError
from swarm_node.node.run.run_lock import LOCK_FILE, RunLock
from tests.helpers.paths import ROOT
from tests.helpers.wait import wait_until


def _cli(*args: str) -> list[str]:
    return [sys.executable, "-m", "swarm_node.node.cli", *args]


def _train(model: Path, run: Path, steps: int, *extra: str) -> list[str]:
    return _cli("train", "--model.name", str(model), "--run.dir", str(run), "--train.steps", str(steps),
                "--run.progress", "off", "--run.plot", "false", "--eval.at_start", "false", "--eval.at_end", "false",
                "--run.checkpoint_every", "0", *extra)


def test_the_lock_goes_with_the_holder_and_says_who_it_is(tmp_path):
    held = RunLock.acquire(tmp_path)
    with pytest.raises(ConfigError) as e:
        RunLock.acquire(tmp_path)
    assert f"is in use by process {os.getpid()}" in str(e.value) and "choose another --run.dir" in str(e.value)
    held.release()
    RunLock.acquire(tmp_path).release()  # free again
    assert (tmp_path / LOCK_FILE).read_text() == ""  # a released lock names no holder


@pytest.mark.subprocess
def test_a_second_train_on_a_folder_in_use_stops_at_once_and_a_killed_owners_folder_is_free(tiny_model_dir, tmp_path):
    run = tmp_path / "same"
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    first = subprocess.Popen(_train(tiny_model_dir, run, 100000, "--generation.prompts_per_step", "1",
                                    "--generation.num_generations", "2"),
                             cwd=tmp_path, env=env, stdout=subprocess.DEVNULL,
                             stderr=(tmp_path / "first.log").open("w"))  # a pipe nobody reads could fill
    try:
        status = run / "status.json"
        wait_until(lambda: status.is_file() and json.loads(status.read_text() or "{}").get("step", 0) >= 1, 180,
                   "the first node trains")
        before = {p.name: p.stat().st_mtime_ns for p in run.iterdir()}
        second = subprocess.run(_train(tiny_model_dir, run, 2), cwd=tmp_path, env=env, capture_output=True,
                                text=True, timeout=120)
        assert second.returncode == 2, second.stderr[-2000:]
        message = second.stderr[second.stderr.index("swarm-node: "):]
        assert f"run folder {run} is in use by process {first.pid}" in message, message
        assert "train" in message and "Traceback" not in second.stderr
        # It wrote nothing there: the first node's files are the first node's (it goes on writing
        # its own, so compare only what the second could have written before the check).
        assert "config.json" not in before or (run / "config.json").stat().st_mtime_ns == before["config.json"]
        assert first.poll() is None  # the owner trains on
    finally:
        first.send_signal(signal.SIGKILL)  # killed: no clean stop, the lock file stays behind
        first.wait(timeout=60)
    assert json.loads((run / LOCK_FILE).read_text())["pid"] == first.pid  # stale, but not a lock
    # The killed owner's folder is free: a new run starts there (no checkpoint was written, so it
    # is a fresh start, which a folder without checkpoints allows).
    taken = subprocess.run(_train(tiny_model_dir, run, 1), cwd=tmp_path, env=env, capture_output=True, text=True,
                           timeout=300)
    assert taken.returncode == 0 and "is in use by" not in taken.stderr, taken.stderr[-2000:]
