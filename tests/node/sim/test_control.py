"""The simulator's control nodes (node/sim/control.py): their flags (alone, on a sharing node's own
groups per step), how they are launched, and the summary's swarm-against-control comparison.
The end-to-end runs are in test_control_sim.py."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from swarm_node.node.config.config import load_config
from swarm_node.node.sim.argv import node_args, worker_args
from swarm_node.node.sim.control import comparison, comparison_lines, control_flags
from swarm_node.node.sim.spec import SimSpec, is_control
from swarm_node.node.sim.summary import write_summary
from swarm_node.node.sim.table import status_rows


def _flags(args: list[str]) -> dict[str, str]:
    return {args[i][2:]: args[i + 1] for i in range(0, len(args), 2) if args[i].startswith("--")}


def test_a_control_node_trains_alone_on_a_sharing_nodes_own_groups():
    sharing = load_config(None, {"swarm.transport": "memory", "generation.prompts_per_step": 8,
                                 "swarm.external_groups": 3})
    flags = control_flags(sharing)
    assert flags == {"swarm.transport": "none", "generation.prompts_per_step": 5}  # I = 8 - 3
    alone = load_config(None, {"swarm.transport": "memory", "generation.prompts_per_step": 8,
                               "swarm.external_groups": 3, **flags})
    assert alone.local_groups == sharing.local_groups == 5  # the same own generation per step


def test_only_the_last_nodes_are_controls_and_get_the_control_flags():
    spec = SimSpec(nodes=3, transport="hivemind", run_dir=Path("/r"), control=1,
                   control_flags={"swarm.transport": "none", "generation.prompts_per_step": "4"},
                   overrides={"swarm.external_groups": "4"})
    assert [is_control(spec, i) for i in range(3)] == [False, False, True]
    a = [_flags(node_args(spec, i)) for i in range(3)]
    assert "swarm.transport" not in a[0] and a[1]["run.dir"] == "/r/node1"
    assert a[2]["swarm.transport"] == "none" and a[2]["generation.prompts_per_step"] == "4"
    assert a[2]["train.seed"] == "2" and a[2]["run.dir"] == "/r/node2"
    memory = SimSpec(nodes=3, transport="memory", run_dir=Path("/r"), control=1,
                     control_flags={"generation.prompts_per_step": "4"})
    w = worker_args(memory)
    assert w[w.index("--control") + 1] == "1"
    assert json.loads(w[w.index("--control-flags") + 1]) == {"generation.prompts_per_step": "4"}
    assert "--control" not in worker_args(SimSpec(nodes=2, transport="memory", run_dir=Path("/r")))


def _ev(score: float, step: int, n: int = 10) -> dict:
    return {"step": step, "greedy": score, "sampled": score / 2, "n": n, "families": {"counting": {"n": n}}}


ROLES = {"node0": "swarm", "node1": "swarm", "node2": "control"}


def test_comparison_of_swarm_and_control_held_out_by_hand():
    series = {"node0": [_ev(0.1, 0), _ev(0.2, 30), _ev(0.4, 60)],
              "node1": [_ev(0.2, 0), _ev(0.2, 30), _ev(0.3, 60)],
              "node2": [_ev(0.1, 0), _ev(0.3, 30), _ev(0.2, 60)]}
    c = comparison(ROLES, series)
    assert abs(c["swarm_start"] - 0.15) < 1e-12 and abs(c["swarm_last"] - 0.35) < 1e-12
    assert c["control_start"] == 0.1 and c["control_last"] == 0.2
    assert c["swarm_range"] == [0.3, 0.4] and c["control_range"] == [0.2, 0.2]
    assert abs(c["margin"] - 0.15) < 1e-12 and c["step"] == 60
    # The end score: each node's mean over steps 30 and 60 (the last three after step 0 it has):
    # sharing (0.2 + 0.4) / 2 = 0.3 and (0.2 + 0.3) / 2 = 0.25, the control (0.3 + 0.2) / 2 = 0.25.
    assert c["end_steps"] == [30, 60] and c["controls"] == 1 and set(c["end"]) == {"greedy", "sampled"}
    g = c["end"]["greedy"]
    assert g["swarm"] == pytest.approx(0.275) and g["control"] == pytest.approx(0.25)
    assert g["swarm_range"] == pytest.approx([0.25, 0.3]) and g["margin"] == pytest.approx(0.025)
    assert "interval" not in g  # one sim gives no interval (node/sim/control.py)
    assert c["end"]["sampled"]["margin"] == pytest.approx(0.0125)  # sampled pass@1 is compared too
    text = "\n".join(comparison_lines(c))
    assert "at steps 30 and 60, the last two every node evaluated after training began" in text
    assert ("greedy pass@1: sharing nodes 0.275 (nodes 0.250-0.300), control 0.250 (0.250-0.250) (before "
            "training: sharing 0.150, control 0.100): margin +0.025, the swarm ended 0.025 above the control.") in text
    assert "sampled pass@1: sharing nodes 0.138" in text
    # The control stopped after step 30 (Ctrl-C, or it crashed): both sides at step 30, not 60 against 30.
    early = comparison(ROLES, {**series, "node2": series["node2"][:2]})
    assert early["step"] == 30 and abs(early["margin"] - (0.2 - 0.3)) < 1e-12 and early["end_steps"] == [30]
    assert "0.100 below the control" in "\n".join(comparison_lines(early))
    # No start evaluation: no "before training" number, never a later one standing in for it.
    later = comparison(ROLES, {k: v[1:] for k, v in series.items()})
    assert later["swarm_start"] is None and "before training" not in "\n".join(comparison_lines(later))


def test_two_controls_give_the_margin_and_ranges_and_no_interval():
    """With two controls and two sharing nodes of one sim the paragraph still gives the margin and
    each side's range and no confidence interval: the sharing nodes learn from each other, so one
    sim is one sample of the swarm, and the text sends the reader to scripts/exp_payoff.py."""
    roles = {"node0": "swarm", "node1": "swarm", "node2": "control", "node3": "control"}
    series = {n: [_ev(0.1, 0), _ev(score, 10)] for n, score in zip(roles, (0.4, 0.5, 0.1, 0.3))}
    c = comparison(roles, series)
    g = c["end"]["greedy"]
    assert c["controls"] == 2 and g["margin"] == pytest.approx(0.25)
    assert g["swarm_range"] == pytest.approx([0.4, 0.5]) and g["control_range"] == pytest.approx([0.1, 0.3])
    assert set(g) == {"swarm", "control", "swarm_range", "control_range", "margin"}
    assert c["end"]["sampled"]["margin"] == pytest.approx(0.125)
    text = "\n".join(comparison_lines(c))
    assert ("greedy pass@1: sharing nodes 0.450 (nodes 0.400-0.500), control 0.200 (0.100-0.300) (before training: "
            "sharing 0.100, control 0.100): margin +0.250, the swarm ended 0.250 above the control.") in text
    assert "One sim is one sample of the swarm" in text and "scripts/exp_payoff.py" in text
    assert "95%" not in text and "bootstrap" not in text
    assert text.count("One sim is one sample") == 1  # once, after both statistics


def test_no_comparison_without_both_sides_or_on_different_questions():
    series = {"node0": [_ev(0.1, 0), _ev(0.4, 60)], "node1": [_ev(0.2, 0), _ev(0.3, 60)],
              "node2": [_ev(0.1, 0), _ev(0.2, 60)]}
    assert comparison({"node0": "swarm", "node1": "swarm"}, series) is None and comparison_lines(None) == []
    never = comparison(ROLES, {**series, "node2": []})
    assert "node2" in never["incomparable"] and "not compared" in "\n".join(comparison_lines(never))
    apart = comparison(ROLES, {**series, "node2": [_ev(0.1, 5), _ev(0.2, 50)]})
    assert "no evaluated step" in apart["incomparable"]
    # A folder resumed under another config: the old nodes evaluated other questions.
    other = comparison(ROLES, {**series, "node2": [_ev(0.1, 0, n=64), _ev(0.2, 60, n=64)]})
    assert "different questions" in other["incomparable"]


def _node(d: Path, score: float, groups: int) -> None:
    d.mkdir(parents=True)
    recs = [{"step": s, "correct": 0.1, "rho": 1.0, "external_by_peer": {"p": groups} if groups else {},
             **({"eval": {"greedy": score, "sampled": score, "n": 4, "families": {"counting": {"n": 4}}}}
                if s == 4 else {})}
            for s in range(1, 5)]
    (d / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in recs))
    (d / "eval").mkdir()
    (d / "eval" / "step_0.json").write_text(json.dumps({"step": 0, "greedy": 0.1, "sampled": 0.1, "n": 4,
                                                        "families": {"counting": {"n": 4}}}))
    (d / "status.json").write_text(json.dumps({"step": 4, "total_steps": 4, "phase": "finished",
                                               "last": recs[-1], "swarm": {}}))


def test_summary_table_and_plot_set_the_swarm_against_the_control(tmp_path):
    _node(tmp_path / "node0", 0.5, 2)
    _node(tmp_path / "node1", 0.3, 2)
    _node(tmp_path / "node2", 0.2, 0)
    (tmp_path / "sim.json").write_text("{}")
    spec = SimSpec(nodes=3, transport="memory", run_dir=tmp_path, control=1)
    assert [r["node"] for r in status_rows(spec)] == ["node0", "node1", "node2 (control)"]
    summary = write_summary(spec, 1.0, False, {})
    assert [n["role"] for n in summary["nodes"]] == ["swarm", "swarm", "control"]
    assert [n["held_out_start"]["step"] for n in summary["nodes"]] == [0, 0, 0]  # from eval/step_0.json
    v = summary["versus_control"]
    assert abs(v["swarm_last"] - 0.4) < 1e-12 and v["control_last"] == 0.2 and abs(v["margin"] - 0.2) < 1e-12
    md = (tmp_path / "summary.md").read_text()
    assert "2 nodes and 1 control" in md and "| node2 (control) | 4 |" in md
    assert "| 0.100 | 0.500 |" in md  # held-out before training, then last
    assert "0.200 above the control" in md
    assert str(tmp_path / "held_out.png") in summary["plots"]


def test_each_control_node_trains_on_its_own_seed(tmp_path, monkeypatch):
    """``--control 2`` gives two independent trajectories: node i gets ``train.seed`` + i, the
    controls included (their task draws and samples follow it), whether the nodes are processes
    (node_args) or run in the memory worker (node_overrides)."""
    from swarm_node.node.cli import main
    from swarm_node.node.sim.argv import worker_args
    from swarm_node.node.sim.worker import node_overrides

    seen = {}

    async def fake_sim(spec):
        seen["spec"] = spec
        (spec.run_dir / "summary.md").parent.mkdir(parents=True, exist_ok=True)
        (spec.run_dir / "summary.md").write_text("done\n")
        return {"failed": {}, "interrupted": False, "plots": []}

    monkeypatch.setattr("swarm_node.node.sim.runner.run_sim", fake_sim)
    assert main(["sim", "--nodes", "2", "--control", "2", "--transport", "memory", "--train.seed", "7",
                 "--run.dir", str(tmp_path / "sim"), "--swarm.external_groups", "1"]) == 0
    spec = seen["spec"]
    assert spec.seed == 7 and spec.nodes == 4 and spec.control == 2
    procs = [_flags(node_args(spec, i)) for i in range(4)]
    assert [a["train.seed"] for a in procs] == ["7", "8", "9", "10"]
    assert [a.get("swarm.transport") for a in procs[2:]] == ["none", "none"]

    async def fake_worker(n, run_dir, seed, config, overrides, control, control_flags, node_flags):
        seen.update(seed=seed, overrides=overrides, control=control, control_flags=control_flags)
        return 0

    monkeypatch.setattr("swarm_node.node.sim.worker.run_worker", fake_worker)
    assert main(worker_args(spec)) == 0  # parsed as the worker process parses its command line
    inproc = [node_overrides(i, 4, tmp_path, seen["seed"], seen["overrides"], seen["control"], seen["control_flags"])
              for i in range(4)]
    assert [a["train.seed"] for a in inproc] == [7, 8, 9, 10]
    assert [a["swarm.transport"] for a in inproc] == ["memory", "memory", "none", "none"]
