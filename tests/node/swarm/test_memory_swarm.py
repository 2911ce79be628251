"""Several nodes in one process over the in-memory transport: SAPO mixing end to end."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

from swarm_node.node.transport.memory import MemoryHub
from tests.helpers.swarm_helpers import create_node, run_all, swarm_cfg


async def run_nodes(cfgs, hub):
    nodes = [await create_node(cfg, hub) for cfg in cfgs]
    return await run_all(nodes), nodes


def test_three_nodes_train_on_each_others_rollouts(warm_tiny_model_dir, tmp_path):
    hub = MemoryHub()
    cfgs = [swarm_cfg(warm_tiny_model_dir, tmp_path / f"n{i}", **{"train.seed": i}) for i in range(3)]
    summaries, nodes = asyncio.run(run_nodes(cfgs, hub))
    ids = {n.swarm.peer_id for n in nodes}
    for s, n in zip(summaries, nodes):
        sw = s["swarm"]
        assert sw["rejected_total"] == 0
        used = sw["groups_used_by_peer"]
        assert set(used) <= ids - {n.swarm.peer_id}
        assert len(used) == 2, used  # trained on both other peers
        recs = [json.loads(l) for l in (Path(n.run_dir) / "metrics.jsonl").read_text().splitlines()]
        assert all("round" in r for r in recs)
        assert sum(r["external_groups"] for r in recs) >= 2
        assert all(r["external_groups"] <= 2 for r in recs)
        status = json.loads((Path(n.run_dir) / "status.json").read_text())
        assert status["swarm"]["peer_id"] == n.swarm.peer_id
        assert status["swarm"]["found_via"] == "hub" and all(r["found_via"] == "hub" for r in recs)  # the live line's
        assert max(r["peers_alive"] for r in recs) == 2  # both heartbeats verified (while all ran)


def test_a_node_alone_in_a_swarm_trains_on_its_own_groups(warm_tiny_model_dir, tmp_path):
    # No peer publishes: every step waits until the round ends, then learns from its I groups.
    summaries, nodes = asyncio.run(run_nodes([swarm_cfg(warm_tiny_model_dir, tmp_path / "alone",
                                                        **{"train.steps": 2})], MemoryHub()))
    recs = [json.loads(l) for l in (nodes[0].run_dir / "metrics.jsonl").read_text().splitlines()]
    assert [r["external_groups"] for r in recs] == [0, 0]
    assert all(r["batch_size"] == 2 * 4 for r in recs)  # I = 4 - 2 groups of G = 4
    assert summaries[0]["steps"] == 2
