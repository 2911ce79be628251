"""``swarm-node sim`` as a test runs it: a child process over the small settings, and the process
tree it leaves (nodes and their daemons), read from /proc."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

from tests.helpers.paths import ROOT
from tests.helpers.wait import wait_until

SMALL = ["--generation.prompts_per_step", "4", "--generation.num_generations", "4",
         "--generation.max_completion_length", "8", "--swarm.external_groups", "2",
         "--learner.learning_rate", "3e-3", "--run.progress", "plain",
         "--eval.at_end", "false", "--eval.at_start", "false"]  # on in test_sim_runs_a_swarm_to_the_end only


def descendants(pid: int) -> set[int]:
    """Every live process below ``pid`` (children, grandchildren: nodes and their p2pd daemons)."""
    children: dict[int, list[int]] = {}
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            try:
                ppid = int((d / "stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            children.setdefault(ppid, []).append(int(d.name))
    out, todo = set(), [pid]
    while todo:
        for c in children.get(todo.pop(), []):
            out.add(c)
            todo.append(c)
    return out


def alive(pids: set[int]) -> set[int]:
    out = set()
    for p in pids:
        try:
            state = Path(f"/proc/{p}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if state != "Z":
            out.add(p)
    return out


def cmdline_of(pid: int) -> bytes:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return b""


def start_sim(tmp_path: Path, model_dir: Path, *args: str) -> subprocess.Popen:
    env = dict(os.environ, OMP_NUM_THREADS="1")
    log = (tmp_path / "sim.log").open("wb")
    return subprocess.Popen([sys.executable, "-m", "swarm_node.node.cli", "sim", "--run.dir", str(tmp_path / "sim"),
                             "--model.name", str(model_dir), *SMALL, *args],
                            stdout=log, stderr=subprocess.STDOUT, cwd=ROOT, env=env)


def watch_tree(p: subprocess.Popen, seen: set[int]) -> None:
    seen |= descendants(p.pid)


def wait_watching(p: subprocess.Popen, seen: set[int], timeout: float) -> int:
    """Wait for the simulator to exit, recording every process below it on the way."""
    deadline = time.time() + timeout
    while p.poll() is None and time.time() < deadline:
        watch_tree(p, seen)
        time.sleep(0.3)
    return p.wait(timeout=10)


def node_step(node_dir: Path) -> int:
    try:
        return int(json.loads((node_dir / "status.json").read_text()).get("step", 0))
    except (OSError, ValueError):
        return 0


def wait_training(p: subprocess.Popen, run: Path, nodes: int, seen: set[int], steps: int = 1) -> None:
    """Wait until every node has trained ``steps`` steps, recording the process tree (a node
    writes status.json from its start-up on, so the file alone does not mean it trains)."""
    def training() -> bool:
        watch_tree(p, seen)
        return all(node_step(run / f"node{i}") >= steps for i in range(nodes))

    wait_until(training, 180, f"{nodes} nodes to train", p)
