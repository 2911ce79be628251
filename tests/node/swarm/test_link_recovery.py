"""A node whose p2p daemon dies mid-run rejoins and trains on its peers' rollouts again (slow:
real `swarm-node join` processes and a bootstrap on loopback)."""

from __future__ import annotations

import os
import signal
import time

import pytest

from tests.helpers.procs import metrics, p2pd_children_of, procs, status  # noqa: F401 - procs is a fixture
from tests.helpers.wait import wait_until

pytestmark = [pytest.mark.slow, pytest.mark.subprocess]


def test_a_node_whose_p2p_daemon_is_killed_rejoins_and_trains_with_peers_again(procs, warm_tiny_model_dir, tmp_path):
    _, maddr = procs.bootstrap()
    common = ["--train.steps", "400", "--swarm.round_seconds", "1.5"]
    a = procs.node("a", maddr, warm_tiny_model_dir, *common, "--train.seed", "0")
    b = procs.node("b", maddr, warm_tiny_model_dir, *common, "--train.seed", "1")
    wait_until(lambda: sum(r.get("external_groups", 0) for r in metrics(tmp_path / "b")) >= 4, 180,
               "b to train on a's rollouts", b)
    [daemon] = p2pd_children_of([b.pid])
    os.kill(daemon, signal.SIGKILL)  # the daemon only: the node process lives on
    killed_at = time.time()

    def back() -> bool:
        sw = status(tmp_path / "b").get("swarm") or {}
        return sw.get("link") == "up" and sw.get("outages", 0) >= 1 and sw.get("last_outage_s") is not None

    wait_until(back, 90, "b to notice the outage and rejoin", b)
    sw = status(tmp_path / "b")["swarm"]
    print(f"p2pd killed: the node was down {sw['last_outage_s']:.1f} s")  # shown with pytest -s
    assert sw["last_outage_s"] < 30, sw  # the bound: rejoined within 30 s
    assert p2pd_children_of([b.pid]) != [daemon]  # a new daemon, not the old one

    def trains_with_peers_again() -> bool:
        return any(r.get("external_groups", 0) > 0 and r["time"] > killed_at + sw["last_outage_s"]
                   for r in metrics(tmp_path / "b"))

    wait_until(trains_with_peers_again, 90, "b to train on a's rollouts after rejoining", b)
    assert sw["outages"] == 1 and sw["rejoin_attempts"] >= 1
    assert a.poll() is None and b.poll() is None  # neither node stopped
