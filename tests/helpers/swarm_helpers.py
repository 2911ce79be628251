"""Helpers for swarm tests: node configs and running several nodes in one event loop."""

from __future__ import annotations

import asyncio
from pathlib import Path

from swarm_node.node.config.config import NodeConfig, load_config
from swarm_node.node.run.trainer import TrainingNode
from swarm_node.node.run.wiring import identity_path
from swarm_node.node.transport.memory import MemoryHub, MemoryTransport
from swarm_node.protocol.identity import load_or_create_identity


def swarm_cfg(model_dir: Path, run_dir: Path, **over) -> NodeConfig:
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
        "eval.at_end": False,  # the held-out evaluation has tests of its own (tests/node/evaluate/test_held_out_run.py)
        "eval.at_start": False,
        "train.threads": 1,
        "swarm.transport": "memory",
        "swarm.external_groups": 2,
        "swarm.round_seconds": 0.6,
        "swarm.poll_seconds": 0.05,
    }
    base.update(over)
    return load_config(None, base)


async def create_node(cfg: NodeConfig, hub: MemoryHub) -> TrainingNode:
    ident = load_or_create_identity(identity_path(cfg))
    t = MemoryTransport(swarm=cfg.swarm.name, publisher=ident.peer_id, hub=hub)
    return await TrainingNode.create(cfg, transport=t)


async def run_all(nodes: list[TrainingNode], *extra) -> list:
    """Run nodes (and extra coroutines) to completion; always close every node."""
    try:
        return await asyncio.gather(*(n.run() for n in nodes), *extra)
    finally:
        for n in nodes:
            await n.close()


def train_to_end(cfg: NodeConfig) -> dict:
    """One node built from ``cfg`` (its own transport, if any), trained to the end in this process
    and closed; its summary."""
    async def go():
        node = await TrainingNode.create(cfg)
        try:
            return await node.run()
        finally:
            await node.close()

    return asyncio.run(go())
