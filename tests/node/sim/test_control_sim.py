"""``swarm-node sim --control 1``: the sharing nodes and one node training alone, end to end, over
the real hivemind carrier (the demo's) and in one process (memory). The control node exchanges
nothing: it is no one's peer, uses no peer group, and generates a sharing node's own groups."""

from __future__ import annotations

import json

import pytest

from swarm_node.node.observe.metrics import read_metrics
from tests.helpers.sim_procs import alive, start_sim, wait_watching

pytestmark = [pytest.mark.slow, pytest.mark.subprocess]


@pytest.mark.parametrize("transport", ["hivemind", "memory"])
def test_sim_with_a_control_node_compares_it_with_the_swarm(transport, warm_tiny_model_dir, tmp_path):
    p = start_sim(tmp_path, warm_tiny_model_dir, "--nodes", "2", "--control", "1", "--transport", transport,
                  "--train.steps", "4", "--swarm.round_seconds", "1.5", "--swarm.external_groups", "1",
                  "--eval.at_end", "true", "--eval.at_start", "true", "--eval.tasks_per_family", "2",
                  "--eval.samples", "1")
    seen: set[int] = set()
    assert wait_watching(p, seen, 300) == 0, (tmp_path / "sim.log").read_text()[-3000:]
    run = tmp_path / "sim"
    summary = json.loads((run / "summary.json").read_text())
    sharing, control = summary["nodes"][:2], summary["nodes"][2]
    assert [n["role"] for n in summary["nodes"]] == ["swarm", "swarm", "control"]
    assert all(n["steps"] == 4 for n in summary["nodes"])
    assert all(n["peers_used"] == 1 for n in sharing)  # each other, never the control
    assert control["groups_used"] == 0 and control["peers_used"] == 0
    # The control generates the groups a sharing node generates itself: I = 4 - 1, of G = 4.
    alone, shared = read_metrics(run / "node2" / "metrics.jsonl"), read_metrics(run / "node0" / "metrics.jsonl")
    assert {r["gen_batch"] for r in alone} == {r["gen_batch"] for r in shared} == {12}
    assert all("external_groups" not in r for r in alone) and any(r.get("external_groups") for r in shared)
    for n in summary["nodes"]:  # evaluated before the first step and after the last
        assert n["held_out_start"]["step"] == 0 and n["held_out"]["step"] == 4
        assert (run / n["node"] / "eval" / "step_0.json").exists()
    v = summary["versus_control"]
    assert v["step"] == 4 and v["control_last"] == control["held_out"]["greedy"]
    assert "and 1 control" in (run / "summary.md").read_text()
    assert "Swarm against control" in (run / "summary.md").read_text()
    assert (run / "held_out.png").stat().st_size > 1000
    assert json.loads((run / "sim.json").read_text())["control"] == 1
    assert alive(seen) == set()
