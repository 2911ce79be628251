"""Launching real swarm-node processes (bootstrap and join) on loopback for the slow tests."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.helpers.paths import ROOT
from tests.helpers.wait import wait_until


LOOPBACK_FLAGS = [
    "--swarm.host_maddrs", '["/ip4/127.0.0.1/tcp/0"]',
    "--swarm.use_relay", "false",
    "--swarm.nat_port_map", "false",
]


def _env() -> dict:
    env = dict(os.environ)
    env["OMP_NUM_THREADS"] = "1"  # several torch processes on 2 cores: oversubscription stalls
    env["PYTHONUNBUFFERED"] = "1"
    return env



def stop_all(procs: list[subprocess.Popen], grace_s: float = 20.0) -> None:
    """SIGTERM every process still running, then SIGKILL those not gone within ``grace_s`` in all."""
    for p in procs:
        if p.poll() is None:
            p.send_signal(signal.SIGTERM)
    deadline = time.monotonic() + grace_s
    for p in procs:
        try:
            p.wait(timeout=max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()

class Procs:
    """Owns every process a test starts; ``close`` leaves none behind."""

    def __init__(self, root: Path):
        self.root = root
        self.procs: list[subprocess.Popen] = []

    def _spawn(self, args: list[str], log: Path) -> subprocess.Popen:
        f = log.open("ab")
        p = subprocess.Popen([sys.executable, "-m", "swarm_node.node.cli", *args], stdout=f, stderr=subprocess.STDOUT,
                             env=_env(), cwd=ROOT)
        f.close()
        self.procs.append(p)
        return p

    def bootstrap(self, timeout: float = 60.0, transport: str = "hivemind") -> tuple[subprocess.Popen, str]:
        maddr_file = self.root / f"bootstrap-{transport}.maddr"
        key = "bootstrap.key" if transport == "hivemind" else "bootstrap-libp2p.pem"
        p = self._spawn(["bootstrap", "--transport", transport, "--host", "127.0.0.1", "--port", "0", "--no-nat",
                         "--no-relay", "--identity", str(self.root / key), "--maddr-file", str(maddr_file)],
                        self.root / f"bootstrap-{transport}.log")
        wait_until(lambda: maddr_file.exists(), timeout, "bootstrap multiaddr", p)
        return p, maddr_file.read_text().split()[0]

    def node(self, name: str, maddr: str, model_dir: Path, *extra: str) -> subprocess.Popen:
        """A node over hivemind, joined through the bootstrap peer at ``maddr``."""
        return self._join(name, ["--bootstrap", maddr, *LOOPBACK_FLAGS], model_dir, extra)

    def libp2p_node(self, name: str, maddr: str, model_dir: Path, *extra: str) -> subprocess.Popen:
        """A node over py-libp2p, joined through the libp2p bootstrap peer at ``maddr``."""
        return self._join(name, ["--transport", "libp2p", "--bootstrap", maddr,
                                 "--swarm.host_maddrs", '["/ip4/127.0.0.1/tcp/0"]'], model_dir, extra)

    def mqtt_node(self, name: str, broker_url: str, model_dir: Path, *extra: str) -> subprocess.Popen:
        """A node over MQTT (the broker's password and TLS flags go in ``extra``)."""
        return self._join(name, ["--transport", "mqtt", "--broker", broker_url], model_dir, extra)

    def _join(self, name: str, how: list[str], model_dir: Path, extra) -> subprocess.Popen:
        run_dir = self.root / name
        return self._spawn(["join", *how, "--run.dir", str(run_dir), "--model.name", str(model_dir),
                            "--run.progress", "plain", "--run.plot", "false", "--train.threads", "1",
                            "--generation.prompts_per_step", "4", "--generation.num_generations", "4",
                            "--generation.max_completion_length", "8", "--swarm.external_groups", "2",
                            "--learner.learning_rate", "3e-3", *extra],
                           self.root / f"{name}.log")

    def close(self) -> None:
        stop_all(self.procs)


@pytest.fixture
def procs(tmp_path):
    """A ``Procs`` in ``tmp_path`` (import it into a test module to use it); none is left behind."""
    p = Procs(tmp_path)
    yield p
    p.close()


def metrics(run_dir: Path) -> list[dict]:
    path = run_dir / "metrics.jsonl"
    if not path.exists():
        return []
    out = []
    for line in path.read_text().splitlines():
        try:
            out.append(json.loads(line))
        except json.JSONDecodeError:
            pass  # a line being written
    return out


def status(run_dir: Path) -> dict:
    return json.loads((run_dir / "status.json").read_text())


def p2pd_children_of(pids: list[int]) -> list[int]:
    """p2pd processes whose parent is one of ``pids`` (for the no-orphans check)."""
    out = []
    for d in Path("/proc").iterdir():
        if not d.name.isdigit():
            continue
        try:
            stat = (d / "stat").read_text()
            cmd = (d / "cmdline").read_bytes()
        except OSError:
            continue
        ppid = int(stat.rsplit(")", 1)[1].split()[1])
        if b"p2pd" in cmd and ppid in pids:
            out.append(int(d.name))
    return out


def hostile_refusals(refused: dict[str, int], versions: int) -> dict[str, int]:
    """A follower's ``manifests_refused`` without what an honest swarm causes: a relay (or the
    directory) offering a version older than one the follower already took by another path. Those
    are counted as ``old_version``, as a replayed manifest is (the two cannot be told apart), and on
    a loaded machine they happen; more than one per version published would not be honest."""
    assert refused.get("old_version", 0) <= versions, refused
    return {k: n for k, n in refused.items() if k != "old_version"}
