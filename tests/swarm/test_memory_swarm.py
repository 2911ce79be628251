"""Several nodes in one process over the in-memory transport: SAPO mixing end to end."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

from node.config import load_config
from node.trainer import TrainingNode
from node.transport.memory import MemoryHub, MemoryTransport


def swarm_cfg(model_dir: Path, run_dir: Path, **over):
    base = {
        "model.name": str(model_dir),
        "run.dir": str(run_dir),
        "run.progress": "off",
        "run.plot": False,
        "run.checkpoint_every": 0,
        "generation.prompts_per_step": 4,
        "generation.num_generations": 4,
        "generation.max_completion_length": 8,
        "learner.learning_rate": 3e-3,
        "train.steps": 4,
        "train.threads": 1,
        "swarm.transport": "memory",
        "swarm.external_groups": 2,
        "swarm.round_seconds": 0.6,
        "swarm.poll_seconds": 0.05,
    }
    base.update(over)
    return load_config(None, base)


async def run_nodes(cfgs, hub):
    nodes = []
    for i, cfg in enumerate(cfgs):
        t = None
        if hub is not None:
            # identity is created by the node; the transport is keyed by its peer id
            from protocol.identity import load_or_create_identity
            from node.trainer import identity_path
            ident = load_or_create_identity(identity_path(cfg))
            t = MemoryTransport(swarm=cfg.swarm.name, publisher=ident.peer_id, hub=hub)
        nodes.append(await TrainingNode.create(cfg, transport=t))
    try:
        return await asyncio.gather(*(n.run() for n in nodes)), nodes
    finally:
        for n in nodes:
            await n.close()


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
