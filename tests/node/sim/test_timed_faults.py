"""The simulator's faults that follow the clock (node/sim/timed.py), kills by time
(node/sim/kills.py), and a learner with some workers beside full nodes; no process started."""

from __future__ import annotations

from pathlib import Path

import pytest

from swarm_node.node.errors import ConfigError
from swarm_node.node.sim import kills as kills_mod, timed as timed_mod
from swarm_node.node.sim.argv import role_flags
from swarm_node.node.sim.faults import SimFaults, load_faults
from swarm_node.node.sim.kills import KillFaults
from swarm_node.node.sim.spec import SimSpec
from swarm_node.node.sim.timed import TimedFaults, maddr_port, read_events


class FakeKids:
    """The Children calls the faults make, recorded."""

    def __init__(self):
        self.calls: list[tuple] = []

    def spawn(self, name, args, log_path):
        self.calls.append(("spawn", name, tuple(args)))

    def kill(self, name):
        self.calls.append(("kill", name))
        return True


class Clock:
    def __init__(self, t: float):
        self.t = t

    def time(self) -> float:
        return self.t


def test_a_kill_takes_a_step_or_a_time_never_both_nor_neither(tmp_path):
    for text, ok in (("at_step = 3", True), ("at_seconds = 30", True), ("", False),
                     ("at_step = 3\nat_seconds = 30", False)):
        f = tmp_path / "f.toml"
        f.write_text(f"[[kill]]\nnode = 0\n{text}\n")
        if ok:
            load_faults(f).check(3, "hivemind")
        else:
            with pytest.raises(ConfigError, match="at_step or at_seconds"):
                load_faults(f)


def test_a_bootstrap_outage_needs_a_bootstrap_peer(tmp_path):
    f = tmp_path / "f.toml"
    f.write_text("[[bootstrap_outage]]\nafter_seconds = 10\nduration_seconds = 5\n")
    load_faults(f).check(3, "hivemind")
    with pytest.raises(ConfigError, match="bootstrap peer"):
        load_faults(f).check(3, "mqtt")


def test_a_kill_by_time_comes_when_its_time_has_passed_whatever_the_step(tmp_path, monkeypatch):
    clock = Clock(1000.0)
    monkeypatch.setattr(kills_mod.time, "time", clock.time)
    monkeypatch.setattr(timed_mod.time, "time", clock.time)
    monkeypatch.setattr(kills_mod, "newest_checkpoint_step", lambda d: 4)
    faults = SimFaults.model_validate({"kill": [{"node": 1, "at_seconds": 30, "down_seconds": 2}]})
    spec = SimSpec(nodes=2, transport="hivemind", run_dir=tmp_path, faults=faults, partition_start=1000.0)
    kids = FakeKids()
    k = KillFaults(spec, kids, lambda i: (["join", f"n{i}"], tmp_path / "log"))
    monkeypatch.setattr(k, "_current_step", lambda i: 7)
    clock.t = 1029.0
    k.step()
    assert kids.calls == []
    clock.t = 1030.0
    k.step()
    assert kids.calls == [("kill", "node1")] and k.waiting
    clock.t = 1032.0
    k.step()
    assert kids.calls[-1] == ("spawn", "node1", ("join", "n1", "--resume")) and k.restarts[1] == 1
    assert k.done == [{"node": 1, "at": 1030.0, "step": 7, "checkpoint": 4}]
    assert [(e["what"], e["node"]) for e in read_events(tmp_path)] == [("kill", 1), ("restart", 1)]


def test_attack_phases_start_and_stop_and_the_bootstrap_comes_back_on_its_port(tmp_path, monkeypatch):
    clock = Clock(1000.0)
    monkeypatch.setattr(timed_mod.time, "time", clock.time)
    faults = SimFaults.model_validate({
        "malicious": [{"attacks": ["garbage"]}, {"attacks": ["flood"], "after_seconds": 10, "duration_seconds": 5}],
        "bootstrap_outage": [{"after_seconds": 20, "duration_seconds": 8}]})
    spec = SimSpec(nodes=2, transport="hivemind", run_dir=tmp_path, faults=faults, partition_start=1000.0)
    (tmp_path / "bootstrap.maddr").write_text("/ip4/127.0.0.1/tcp/40123/p2p/QmX\n")
    kids, restarted = FakeKids(), []
    t = TimedFaults(spec, kids, lambda j: ([f"adv{j}"], tmp_path / "log"), restarted.append)
    seen = []
    for now in (1000.0, 1009.0, 1010.0, 1014.0, 1015.0, 1020.0, 1027.0, 1028.0, 1040.0):
        clock.t = now
        t.step()
        seen.append(list(kids.calls))
    assert kids.calls == [("spawn", "adversary0", ("adv0",)), ("spawn", "adversary1", ("adv1",)),
                          ("kill", "adversary1"), ("kill", "bootstrap")]
    assert [len(c) for c in seen] == [1, 1, 2, 2, 3, 4, 4, 4, 4]  # each at its time, once
    assert restarted == [40123]  # the same port (and key: spawn_bootstrap's) as before
    assert [e["what"] for e in read_events(tmp_path)] == ["adversary_start", "adversary_start", "adversary_stop",
                                                          "bootstrap_stop", "bootstrap_start"]


def test_a_multiaddr_names_its_port():
    assert maddr_port("/ip4/127.0.0.1/tcp/40123/p2p/QmX") == 40123
    with pytest.raises(ValueError):
        maddr_port("/ip4/127.0.0.1/udp/1/quic")


def test_with_workers_set_only_the_first_nodes_follow_the_learner_and_the_rest_are_full():
    assert role_flags("learner-workers", 0, "sn1a", 2) == {"broadcast.role": "learner"}
    assert [role_flags("learner-workers", i, "sn1a", 2).get("broadcast.role") for i in range(1, 6)] == \
        ["worker", "worker", None, None, None]
    assert role_flags("learner-workers", 5, "sn1a") == {"broadcast.role": "worker", "broadcast.follow": "sn1a"}


def test_sim_refuses_workers_without_the_learner_layout(tmp_path, capsys):
    from swarm_node.node.cli import main

    assert main(["sim", "--nodes", "3", "--workers", "1", "--run.dir", str(tmp_path / "s")]) == 2
    assert "--workers 1: needs --roles learner-workers" in capsys.readouterr().err
    assert main(["sim", "--nodes", "3", "--roles", "learner-workers", "--workers", "3",
                 "--run.dir", str(tmp_path / "s")]) == 2
