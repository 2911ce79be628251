"""The simulator shows each node's latest held-out correctness: a live-table column from its
status.json, a summary column and per-family JSON from its records, and one plot line per node."""

from __future__ import annotations

import json

from swarm_node.node.sim.spec import SimSpec
from swarm_node.node.sim.summary import write_summary
from swarm_node.node.sim.table import plain_line, render_table, status_rows

EVAL = {"greedy": 0.375, "sampled": 0.25, "n": 4, "seconds": 1.0,
        "families": {"lists": {"greedy": 0.5, "sampled": 0.25, "n": 2}, "boolean": {"greedy": 0.25, "sampled": 0.25, "n": 2}}}


def _node(d, evaluated: bool) -> None:
    d.mkdir()
    recs = [{"step": s, "correct": 0.1, "rho": 1.0, **({"eval": EVAL} if evaluated and s % 2 == 0 else {})}
            for s in range(1, 5)]
    (d / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in recs))
    status = {"step": 4, "total_steps": 4, "phase": "finished", "last": recs[-1], "swarm": {}}
    if evaluated:
        status["eval"] = {"step": 4, **EVAL}
    (d / "status.json").write_text(json.dumps(status))


def test_table_summary_and_plot_show_held_out_correctness(tmp_path):
    from rich.console import Console

    _node(tmp_path / "node0", True)
    _node(tmp_path / "node1", False)
    (tmp_path / "sim.json").write_text("{}")
    spec = SimSpec(nodes=2, transport="memory", run_dir=tmp_path)
    rows = status_rows(spec)
    assert [r["held_out"] for r in rows] == [0.375, None]
    assert "held-out 0.375" in plain_line(rows) and "held-out -" in plain_line(rows)
    console = Console(width=250, record=True)
    console.print(render_table(rows, "t"))
    text = console.export_text()
    assert "held-out" in text and "0.375" in text
    summary = write_summary(spec, 1.0, False, {})
    n0, n1 = summary["nodes"]
    assert n0["held_out"] == {"step": 4, **EVAL} and n1["held_out"] is None
    # The end score: the mean of the evaluations after steps 2 and 4 (all it made), and the curve.
    assert n0["held_out_end"] == {"steps": [2, 4], "score": 0.375, "greedy": 0.375, "sampled": 0.25}
    assert n0["held_out_curve"] == [[2, 0.375, 0.25], [4, 0.375, 0.25]]
    assert n1["held_out_end"] is None and n1["held_out_curve"] == []
    md = (tmp_path / "summary.md").read_text()
    assert "| held-out end |" in md and "| 0.375 |" in md
    assert str(tmp_path / "held_out.png") in summary["plots"]
