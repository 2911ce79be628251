"""A hivemind join whose bootstrap answers but is no DHT peer (a py-libp2p host): each failed
attempt's p2p daemon is stopped at once, and the node ends on its one message, no traceback."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from tests.helpers.paths import ROOT
from tests.helpers.wait import wait_until

pytestmark = [pytest.mark.daemon, pytest.mark.subprocess]


def test_a_failed_join_leaves_no_daemon_and_prints_no_traceback(tiny_model_dir, tmp_path):
    env = dict(os.environ, PYTHONUNBUFFERED="1", OMP_NUM_THREADS="1")
    maddr = tmp_path / "maddr"
    with (tmp_path / "bootstrap.log").open("wb") as out:  # another carrier's bootstrap: it takes the TCP connection
        boot = subprocess.Popen([sys.executable, "-m", "swarm_node.node.cli", "bootstrap", "--transport", "libp2p", "--host",
                                 "127.0.0.1", "--port", "0", "--identity", str(tmp_path / "key"),
                                 "--maddr-file", str(maddr)], stdout=out, stderr=subprocess.STDOUT, cwd=ROOT, env=env)
    try:
        wait_until(lambda: maddr.exists() and maddr.read_text().strip(), 120, "the libp2p bootstrap to listen", boot)
        addr = maddr.read_text().split()[0]
        # `train` with a hivemind swarm: join's own check would refuse this address before dialling it.
        p = subprocess.run([sys.executable, "-m", "swarm_node.node.cli", "train", "--swarm.transport", "hivemind",
                            "--swarm.initial_peers", f'["{addr}"]', "--model.name", str(tiny_model_dir),
                            "--run.dir", str(tmp_path / "run"), "--swarm.host_maddrs", '["/ip4/127.0.0.1/tcp/0"]',
                            "--swarm.use_relay", "false", "--swarm.nat_port_map", "false",
                            "--swarm.join_retries", "1", "--swarm.join_backoff", "0.1"],
                           cwd=ROOT, env=env, capture_output=True, text=True, timeout=240)
    finally:
        boot.terminate()
        boot.wait(timeout=60)
    out = p.stdout + p.stderr
    assert p.returncode == 1, out[-3000:]
    assert "could not join the swarm after 2 attempts: no bootstrap peer answered" in out
    assert "Traceback" not in out and "Exception ignored" not in out and "is closed" not in out, out[-3000:]
