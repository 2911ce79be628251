"""``swarm-node sim-worker``: the one child process of a memory simulation, running all N nodes over
a shared in-memory hub (the memory transport cannot cross processes); its control nodes (the last
``control``, node/sim/control.py) train in the same process without a transport.
"""

from __future__ import annotations

import asyncio
import logging
import signal
from pathlib import Path

from swarm_node.node.transport.carriers import the

log = logging.getLogger(__name__)


def node_overrides(i: int, n: int, run_dir: Path, seed: int, overrides: dict, control: int = 0,
                   control_flags: dict | None = None, node_flags: dict[int, dict] | None = None) -> dict:
    """Node i's config flags in the worker: every node's, then its own folder, seed and display, a
    control node's flags (the last ``control``), then its ``[[node]]`` flags, in the order a node
    process gets them (node/sim/argv.py's ``node_args``)."""
    own = {**overrides, "swarm.transport": the(lambda c: c.in_process).name, "run.dir": str(run_dir / f"node{i}"),
           "train.seed": seed + i, "run.progress": "off", "run.plot": False, "train.threads": 1}
    if overrides.get("run.metrics_port"):  # one port per node
        own["run.metrics_port"] = int(overrides["run.metrics_port"]) + i
    if i >= n - control:
        own |= control_flags or {}
    return own | (node_flags or {}).get(i, {})


async def run_worker(n: int, run_dir: Path, seed: int, config: Path | None, overrides: dict,
                     control: int = 0, control_flags: dict | None = None,
                     node_flags: dict[int, dict] | None = None) -> int:
    """``sim-worker``: N nodes in this one process over a shared in-memory hub, the last ``control``
    of them alone, each with its ``node_overrides``."""
    from swarm_node.node.config.config import load_config
    from swarm_node.node.run.trainer import TrainingNode
    from swarm_node.node.run.wiring import identity_path
    from swarm_node.node.transport.memory import MemoryHub, MemoryTransport
    from swarm_node.protocol.identity import load_or_create_identity

    hub = MemoryHub()
    nodes: list[TrainingNode] = []
    loop = asyncio.get_running_loop()
    stopping = False

    def stop_all() -> None:
        nonlocal stopping
        stopping = True
        for node in nodes:
            node.request_stop()

    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop_all)
    try:
        for i in range(n):
            cfg = load_config(config, node_overrides(i, n, run_dir, seed, overrides, control, control_flags, node_flags))
            if cfg.swarm.transport == "none":  # a control node (its flags say so): alone
                nodes.append(await TrainingNode.create(cfg))
            else:
                ident = load_or_create_identity(identity_path(cfg))
                t = MemoryTransport(swarm=cfg.swarm.name, publisher=ident.peer_id, hub=hub)
                nodes.append(await TrainingNode.create(cfg, transport=t))
            if stopping:  # a stop that came while this node was being built
                nodes[-1].request_stop()
        results = await asyncio.gather(*(node.run(handle_signals=False) for node in nodes), return_exceptions=True)
    finally:
        for node in nodes:
            await node.close()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.remove_signal_handler(sig)
    errors = [r for r in results if isinstance(r, BaseException)]
    for e in errors:
        log.error("a node failed: %s: %s", type(e).__name__, e)
    if errors:
        return 1
    return 130 if any(r.get("stopped_early") for r in results) else 0
