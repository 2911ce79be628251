"""What the simulator passes to each node (no processes started)."""

from __future__ import annotations

from pathlib import Path

from swarm_node.node.config.config import parse_flag_value
from swarm_node.node.sim.argv import flag_text as _raw, node_args as _node_args
from swarm_node.node.sim.faults import SimFaults
from swarm_node.node.sim.spec import SimSpec


def _flags(args: list[str]) -> dict[str, str]:
    return {args[i][2:]: args[i + 1] for i in range(0, len(args), 2) if args[i].startswith("--")}


def test_values_round_trip_through_flag_text():
    for v in (8, 3e-4, True, [1, 2], ["a", "é"], float("inf")):
        assert parse_flag_value(_raw(v)) == v
    assert _raw("path/x") == "path/x"


def test_per_node_faults_become_that_nodes_flags():
    faults = SimFaults.model_validate({
        "node": [{"index": 1, "flags": {"train.behaviour_lag": 8}}],
        "latency": [{"node": 2, "delay_seconds": 0.5, "jitter_seconds": 0.25}],
        "partition": [{"groups": [[0], [1, 2]], "after_seconds": 10, "duration_seconds": 5}],
    })
    spec = SimSpec(nodes=3, transport="hivemind", run_dir=Path("/r"), overrides={"run.metrics_port": "9400"},
                   faults=faults, peer_ids=["sn1a", "sn1b", "sn1c"], partition_start=1000.0)
    a = [_flags(_node_args(spec, i)) for i in range(3)]
    assert [x["train.seed"] for x in a] == ["0", "1", "2"] and a[1]["run.dir"] == "/r/node1"
    assert a[1]["train.behaviour_lag"] == "8" and "train.behaviour_lag" not in a[0]
    assert a[2]["faults.delay_seconds"] == "0.5" and a[2]["faults.jitter_seconds"] == "0.25"
    assert parse_flag_value(a[0]["faults.blocked_peers"]) == ["sn1b", "sn1c"]
    assert parse_flag_value(a[1]["faults.blocked_peers"]) == ["sn1a"]
    assert (a[1]["faults.blocked_from"], a[1]["faults.blocked_until"]) == ("1010.0", "1015.0")
    assert [x["run.metrics_port"] for x in a] == ["9400", "9401", "9402"]


def test_bad_faults_files_are_refused_with_a_reason(tmp_path):
    import pytest

    from swarm_node.node.errors import ConfigError
    from swarm_node.node.sim.faults import load_faults

    with pytest.raises(ConfigError, match="not found"):
        load_faults(tmp_path / "missing.toml")
    cases = {
        "[[partition]]\ngroups = [[0, 1]]\nafter_seconds = 1\nduration_seconds = 2\n": "at least two groups",
        "[[kill]]\nnode = 5\nat_step = 3\n": "only 3",
        "[[malicious]]\nattacks = [\"nosuch\"]\n": "unknown attacks",
        "[[bogus]]\nx = 1\n": "faults file",
    }
    for text, needle in cases.items():
        f = tmp_path / "f.toml"
        f.write_text(text)
        with pytest.raises(ConfigError, match=needle):
            load_faults(f).check(3, "hivemind")
    f.write_text("[[kill]]\nnode = 0\nat_step = 3\n")
    with pytest.raises(ConfigError, match="hivemind"):
        load_faults(f).check(3, "memory")
    f.write_text('[[node]]\nindex = 1\nflags = { "train.behaviour_lag" = 8 }\n')
    load_faults(f).check(3, "memory")  # per-node flags are only config: the memory worker applies them


def test_per_node_flags_reach_each_node_of_the_memory_worker(tmp_path, monkeypatch):
    """Over memory every node runs in one ``sim-worker``: node i's ``[[node]]`` flags travel to it as
    JSON and go on top of every node's flags (and of a control node's), as a node process's do."""
    from swarm_node.node.cli import main
    from swarm_node.node.sim.argv import worker_args
    from swarm_node.node.sim.worker import node_overrides

    faults = SimFaults.model_validate({"node": [{"index": 1, "flags": {"model.name": "/m1", "train.behaviour_lag": 2}},
                                                {"index": 2, "flags": {"generation.prompts_per_step": 2}}]})
    spec = SimSpec(nodes=3, transport="memory", run_dir=tmp_path, overrides={"generation.prompts_per_step": "8"},
                   faults=faults, control=1, control_flags={"swarm.transport": "none", "generation.prompts_per_step": "4"})
    seen = {}

    async def fake_worker(n, run_dir, seed, config, overrides, control, control_flags, node_flags):
        seen.update(n=n, overrides=overrides, control=control, control_flags=control_flags, node_flags=node_flags)
        return 0

    monkeypatch.setattr("swarm_node.node.sim.worker.run_worker", fake_worker)
    assert main(worker_args(spec)) == 0  # parsed as the worker process parses its command line
    assert seen["node_flags"] == {1: {"model.name": "/m1", "train.behaviour_lag": 2},
                                  2: {"generation.prompts_per_step": 2}}
    a = [node_overrides(i, 3, tmp_path, 0, seen["overrides"], seen["control"], seen["control_flags"],
                        seen["node_flags"]) for i in range(3)]
    assert "model.name" not in a[0] and a[0]["generation.prompts_per_step"] == 8
    assert (a[1]["model.name"], a[1]["train.behaviour_lag"], a[1]["run.dir"]) == ("/m1", 2, str(tmp_path / "node1"))
    assert a[1]["swarm.transport"] == "memory"
    assert a[2]["swarm.transport"] == "none" and a[2]["generation.prompts_per_step"] == 2  # its own beats the control's
    assert "--node-flags" not in worker_args(SimSpec(nodes=2, transport="memory", run_dir=tmp_path))


def test_the_summary_counts_what_a_restarted_node_used_over_its_whole_run(tmp_path):
    """status.json is the last process's; the summary reads every step's record, so peers a node
    used before it was killed still count (its restart may come after the others finished)."""
    import json

    from swarm_node.node.sim.summary import write_summary

    d = tmp_path / "node0"
    d.mkdir()
    recs = [{"step": 1, "external_by_peer": {}}, {"step": 2, "external_by_peer": {"sn1a": 1, "sn1b": 1}},
            {"step": 3, "external_by_peer": {"sn1a": 1}},  # killed here; the restart found nobody
            {"step": 4, "external_by_peer": {}}]
    (d / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in recs))
    (d / "status.json").write_text(json.dumps({"swarm": {"groups_used": 0, "peers_used": 0,
                                                          "groups_used_by_peer": {}}}))
    (tmp_path / "sim.json").write_text("{}")
    spec = SimSpec(nodes=1, transport="memory", run_dir=tmp_path)
    [n] = write_summary(spec, 1.0, False, {})["nodes"]
    assert (n["steps"], n["groups_used"], n["peers_used"]) == (4, 3, 2)
    assert n["groups_used_by_peer"] == {"sn1a": 2, "sn1b": 1}


def test_learner_workers_make_node0_the_learner_and_the_others_follow_it():
    spec = SimSpec(nodes=3, transport="hivemind", run_dir=Path("/r"), peer_ids=["sn1a", "sn1b", "sn1c"],
                   roles="learner-workers")
    a = [_flags(_node_args(spec, i)) for i in range(3)]
    assert a[0]["broadcast.role"] == "learner" and "broadcast.follow" not in a[0]
    assert [(x["broadcast.role"], x["broadcast.follow"]) for x in a[1:]] == [("worker", "sn1a")] * 2
    assert "broadcast.role" not in _flags(_node_args(SimSpec(nodes=2, transport="hivemind", run_dir=Path("/r"),
                                                             peer_ids=["sn1a", "sn1b"]), 1))


def test_the_weights_column_says_what_each_role_holds():
    from swarm_node.node.sim.table import weights_text

    assert weights_text(None) == "-"
    assert weights_text({"role": "learner", "published_version": 7, "followers": 3}) == "publishes v7 to 3"
    assert weights_text({"role": "worker", "applied_version": 5, "lag": 2,
                         "transfer": {"version": 7, "bytes": 50, "total": 200, "from": {"sn1relay12345": 3}}}) \
        == "v5 (lag 2), v7 25% from sn1relay12"


def test_roles_in_the_simulator_need_hivemind(tmp_path, capsys):
    from swarm_node.node.cli import main

    assert main(["sim", "--nodes", "3", "--roles", "learner-workers", "--transport", "memory",
                 "--run.dir", str(tmp_path / "s")]) == 2
    assert "needs --transport hivemind" in capsys.readouterr().err


def test_the_adversary_joins_the_carrier_the_simulated_swarm_runs_on(tmp_path, monkeypatch):
    """``[[malicious]]``'s command, parsed as ``swarm-node adversary`` parses it, names the swarm's
    carrier and where to join it (over libp2p it once named ``libp2p`` twice and was refused)."""
    import swarm_node.node.cli.adversary as cli_adversary
    from swarm_node.node.cli.parser import build_parser
    from swarm_node.node.sim.argv import adversary_args, join_flags

    faults = SimFaults.model_validate({"malicious": [{"attacks": ["garbage"]}]})
    seen = {}

    async def fake_adversary(cfg, attacks):  # the process's entry point, past argument handling
        seen.update(transport=cfg.swarm.transport, peers=cfg.swarm.initial_peers, broker=cfg.swarm.broker,
                    attacks=attacks)
        return 0

    monkeypatch.setattr("swarm_node.node.sim.adversary.run_adversary", fake_adversary)
    maddr, broker = "/ip4/127.0.0.1/tcp/4001/p2p/12D3KooWD3eckifWpRn9wQpMG9R9hX3sD158z7EqHWmweQAJU5SA", "mqtt://127.0.0.1:1883"
    for transport in ("hivemind", "libp2p", "mqtt"):
        spec = SimSpec(nodes=2, transport=transport, run_dir=tmp_path, overrides={}, faults=faults,
                       peer_ids=["a", "b"], partition_start=0.0)
        argv = adversary_args(spec, 0, join_flags(transport, maddr, broker), broker)
        args, unknown = build_parser().parse_known_args(argv)
        seen.clear()
        assert cli_adversary.run_adversary(args, unknown) == 0, argv
        assert seen["transport"] == transport and seen["attacks"] == ["garbage"], (argv, seen)
        if transport == "mqtt":
            assert seen["broker"] == broker
        else:
            assert seen["peers"] == [maddr], (argv, seen)
