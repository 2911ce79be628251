"""Running ``swarm-node sim`` again in the same folder: a finished run says so, a longer one
continues, a stopped one resumes, and every run's nodes join that run's own bootstrap peer
(the README's "run it again"). Also: a start-up that shows each node's phase, and a Ctrl-C
while the simulator builds the default model."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers.procs import metrics
from tests.helpers.wait import wait_until
from tests.helpers.paths import ROOT
from tests.helpers.sim_procs import SMALL, node_step

pytestmark = [pytest.mark.slow, pytest.mark.subprocess]


def sim(tmp_path: Path, model: Path | None, *args: str, env: dict | None = None) -> subprocess.Popen:
    log = (tmp_path / "sim.log").open("ab")
    model_flags = ["--model.name", str(model)] if model is not None else []
    return subprocess.Popen([sys.executable, "-m", "swarm_node.node.cli", "sim", "--run.dir", str(tmp_path / "sim"), *model_flags,
                             *SMALL, "--swarm.round_seconds", "1.0", "--run.resume", "true", *args],
                            stdout=log, stderr=subprocess.STDOUT, cwd=ROOT,
                            env=env or dict(os.environ, OMP_NUM_THREADS="1"))


def finish(p: subprocess.Popen, tmp_path: Path, timeout: float = 240) -> str:
    rc = p.wait(timeout=timeout)
    out = (tmp_path / "sim.log").read_text()
    assert rc == 0, out[-3000:]
    return out


def bootstrap_maddr(run: Path) -> str:
    return (run / "bootstrap.maddr").read_text().split()[0]


def joined_via(node_dir: Path) -> list[str]:
    return json.loads((node_dir / "config.json").read_text())["swarm"]["initial_peers"]


def test_a_second_run_says_it_is_done_and_a_longer_one_continues_on_a_fresh_bootstrap(warm_tiny_model_dir, tmp_path):
    run = tmp_path / "sim"
    finish(sim(tmp_path, warm_tiny_model_dir, "--nodes", "2", "--train.steps", "3"), tmp_path)
    first = bootstrap_maddr(run)
    assert all(joined_via(run / f"node{i}") == [first] for i in range(2))

    # The same command again: nothing to do, said so, exit 0, nothing started or changed.
    logs = {i: (run / f"node{i}" / "node.log").stat().st_size for i in range(2)}
    out = finish(sim(tmp_path, warm_tiny_model_dir, "--nodes", "2", "--train.steps", "3"), tmp_path)
    assert "every node has already trained its 3 steps, so there is nothing to do" in out
    assert "--train.steps 6" in out
    assert {i: (run / f"node{i}" / "node.log").stat().st_size for i in range(2)} == logs

    # More steps: each node resumes from step 3 and joins this run's bootstrap peer, whose
    # address differs from the first run's (same key, a new port): the first run's file is
    # never handed to the nodes.
    finish(sim(tmp_path, warm_tiny_model_dir, "--nodes", "2", "--train.steps", "6"), tmp_path)
    second = bootstrap_maddr(run)
    assert second != first
    for i in range(2):
        assert joined_via(run / f"node{i}") == [second]
        recs = metrics(run / f"node{i}")
        assert [r["step"] for r in recs] == [1, 2, 3, 4, 5, 6]
        assert sum(r["external_groups"] for r in recs[3:]) > 0  # it trained with its peer again
    summary = json.loads((run / "summary.json").read_text())
    assert summary["window"] == 3 and "correct first 3" in (run / "summary.md").read_text()


def test_a_swarm_stopped_mid_way_resumes_where_each_node_checkpointed(warm_tiny_model_dir, tmp_path):
    run = tmp_path / "sim"
    p = sim(tmp_path, warm_tiny_model_dir, "--nodes", "2", "--train.steps", "500", "--run.checkpoint_every", "2")
    wait_until(lambda: all(node_step(run / f"node{i}") >= 3 for i in range(2)), 240, "2 nodes at step 3", p)
    p.send_signal(signal.SIGINT)
    assert p.wait(timeout=120) == 130
    stopped = [node_step(run / f"node{i}") for i in range(2)]
    target = max(stopped) + 3
    finish(sim(tmp_path, warm_tiny_model_dir, "--nodes", "2", "--train.steps", str(target)), tmp_path)
    for i in range(2):
        steps = [r["step"] for r in metrics(run / f"node{i}")]
        assert steps == list(range(1, target + 1)), steps  # one history, nothing redone twice
        log = (run / f"node{i}" / "node.log").read_text()
        assert f"resumed from {run / f'node{i}' / 'checkpoints' / f'step_{stopped[i]:06d}'}" in log
        assert joined_via(run / f"node{i}") == [bootstrap_maddr(run)]


def test_a_node_that_has_not_trained_yet_shows_its_phase(warm_tiny_model_dir, tmp_path):
    # One node alone with J > 0: it joins, generates, then waits for peers that never come, and
    # the simulator's table says so instead of "step 0".
    run = tmp_path / "sim"
    p = sim(tmp_path, warm_tiny_model_dir, "--nodes", "1", "--train.steps", "3", "--swarm.collect_seconds", "30",
            "--swarm.round_seconds", "60")
    def waiting() -> bool:
        try:
            st = json.loads((run / "node0" / "status.json").read_text())
        except (OSError, ValueError):
            return False
        return st["phase"] == "waiting for peers" and st["step"] == 0

    try:
        wait_until(waiting, 120, "node0 to wait for peers", p)
        from swarm_node.node.sim.spec import SimSpec
        from swarm_node.node.sim.table import render_table, status_rows

        rows = status_rows(SimSpec(nodes=1, transport="hivemind", run_dir=run))
        assert rows[0]["phase"].startswith("waiting for peers ") and "peer groups" in rows[0]["phase"]
        from rich.console import Console

        console = Console(width=250, record=True)
        console.print(render_table(rows, "t"))
        assert "waiting for peers" in console.export_text()
    finally:
        p.send_signal(signal.SIGINT)
        p.wait(timeout=120)


def test_a_node_that_refuses_to_start_is_one_clear_message_from_the_simulator(warm_tiny_model_dir, tmp_path):
    # Only a node can see this one (it needs the model's positions): every node exits 2, and
    # the simulator passes the reason on instead of "nodes failed: {...}".
    p = sim(tmp_path, warm_tiny_model_dir, "--nodes", "2", "--transport", "memory", "--train.steps", "3",
            "--generation.max_completion_length", "200")
    assert p.wait(timeout=240) == 2
    out = (tmp_path / "sim.log").read_text()
    assert "swarm-node: --generation.max_completion_length 200 does not fit the model" in out
    assert "refused to start; see" in out and "nodes.log" in out and "Traceback" not in out


def test_ctrl_c_while_the_simulator_builds_the_default_model(tmp_path):
    env = dict(os.environ, OMP_NUM_THREADS="1", SWARM_NODE_HOME=str(tmp_path / "home"))
    p = sim(tmp_path, None, "--nodes", "2", "--train.steps", "3", env=env)
    wait_until(lambda: "building the embedded default model" in (tmp_path / "sim.log").read_text(), 120,
               "the simulator to build the default model", p)
    assert not (tmp_path / "sim" / "node0").exists()  # no node starts before the model exists
    p.send_signal(signal.SIGINT)
    rc = p.wait(timeout=60)
    out = (tmp_path / "sim.log").read_text()
    assert rc == 130, out[-3000:]
    assert "Traceback" not in out and "FATAL" not in out
    assert not list((tmp_path / "home").rglob("BUILD_OK"))  # it left without waiting for the build
