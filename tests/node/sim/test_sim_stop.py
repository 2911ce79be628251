"""A stopped ``swarm-node sim`` leaves a summary marked partial (SIGTERM, or Ctrl-C twice), never an
earlier run's summary looking current; a second stop request kills what is still stopping."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import threading
import time

import pytest

from swarm_node.node.sim.children import Children
from tests.helpers.sim_procs import start_sim, wait_training
from tests.helpers.wait import wait_until

pytestmark = pytest.mark.subprocess


def test_hurry_kills_a_child_that_ignores_sigterm_at_once(tmp_path):
    kids = Children()
    ready = tmp_path / "ready"
    p = subprocess.Popen([sys.executable, "-c", "import signal, pathlib, time; signal.signal(signal.SIGTERM, "
                          f"signal.SIG_IGN); pathlib.Path({str(ready)!r}).touch(); time.sleep(600)"],
                         start_new_session=True)
    kids.procs.append(("node0", p))
    wait_until(ready.exists, 60, "the child to ignore SIGTERM", p)
    stopper = threading.Thread(target=kids.stop, kwargs={"grace": 600})
    stopper.start()
    wait_until(lambda: kids.terminated, 10, "the stop to begin")
    t0 = time.monotonic()
    kids.hurry()
    stopper.join(timeout=30)
    assert not stopper.is_alive() and time.monotonic() - t0 < 30
    assert p.returncode == -signal.SIGKILL and id(p) in kids.killed  # killed on purpose: not a failure


@pytest.mark.slow
@pytest.mark.parametrize("signals", [[signal.SIGTERM], [signal.SIGINT, signal.SIGINT]], ids=["sigterm", "ctrl-c-twice"])
def test_a_stopped_sim_writes_a_partial_summary_and_never_keeps_a_stale_one(signals, warm_tiny_model_dir, tmp_path):
    run = tmp_path / "sim"
    run.mkdir()
    (run / "summary.json").write_text(json.dumps({"nodes": [], "stale": True}))  # an earlier run's
    (run / "summary.md").write_text("an earlier run's summary\n")
    (run / "reward.png").write_bytes(b"old")
    p = start_sim(tmp_path, warm_tiny_model_dir, "--nodes", "2", "--transport", "memory", "--train.steps", "500",
                  "--swarm.round_seconds", "1.0", "--run.checkpoint_every", "1000")
    try:
        wait_training(p, run, 2, set())
        # Running: the earlier run's summary is gone, so nothing in the folder passes for this run's.
        assert not (run / "summary.json").exists() and not (run / "summary.md").exists()
        assert not (run / "reward.png").exists()
        for sig in signals:
            p.send_signal(sig)
        rc = p.wait(timeout=120)
    finally:
        if p.poll() is None:
            p.kill()
    out = (tmp_path / "sim.log").read_text()
    assert rc == 130, out[-3000:]
    assert "Traceback" not in out
    summary = json.loads((run / "summary.json").read_text())
    assert summary["partial"] is True and not summary.get("stale") and not summary["stopping"]
    assert summary["stopped_by"] == signal.Signals(signals[0]).name and not summary["failed"]
    assert all(n["steps"] >= 1 for n in summary["nodes"])
    assert (run / "summary.md").read_text().count("**Partial**: the run was stopped by") == 1
    assert (run / "reward.png").stat().st_size > 100
