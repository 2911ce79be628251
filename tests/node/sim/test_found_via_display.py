"""Which path found the swarm (``found_via``: bootstrap, peer cache, new swarm, broker) is on every
live view: the simulator's table and plain line (from each node's status.json) and a node's own
live panel and plain round line (from its metrics record)."""

from __future__ import annotations

import json
import logging

from swarm_node.node.observe.progress import Progress
from swarm_node.node.sim.spec import SimSpec
from swarm_node.node.sim.table import plain_line, render_table, status_rows


def _node(d, via: str | None) -> None:
    d.mkdir()
    swarm = {"peers_alive": 2, **({"found_via": via} if via else {})}
    (d / "status.json").write_text(json.dumps({"step": 3, "total_steps": 9, "phase": "training",
                                               "last": {"step": 3, "round": 12}, "swarm": swarm}))


def test_the_sim_table_says_how_each_node_found_the_swarm(tmp_path):
    from rich.console import Console

    _node(tmp_path / "node0", "peer cache")
    _node(tmp_path / "node1", "bootstrap")
    _node(tmp_path / "node2", None)  # still joining: nothing to say yet
    rows = status_rows(SimSpec(nodes=3, transport="hivemind", run_dir=tmp_path))
    assert [r["via"] for r in rows] == ["peer cache", "bootstrap", None]
    line = plain_line(rows)
    assert "node0 " in line and "via peer cache" in line and "via bootstrap" in line
    console = Console(width=300, record=True)
    console.print(render_table(rows, "t"))
    text = console.export_text()
    assert "found via" in text and "peer cache" in text and "bootstrap" in text


def test_a_nodes_live_panel_and_round_line_say_how_it_found_the_swarm(caplog):
    from rich.console import Console

    m = {"step": 2, "round": 40, "peers_alive": 1, "link": "up", "found_via": "peer cache"}
    console = Console(width=300, record=True)
    console.print(Progress("off", 10)._render(m))
    assert "up (peer cache)" in console.export_text()
    with caplog.at_level(logging.INFO, logger="swarm_node.node.observe.progress"):
        p = Progress("plain", 10)
        p.update(m)
        p.close()
    assert "swarm found via peer cache" in caplog.text
