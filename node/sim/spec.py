"""What one ``swarm-node sim`` run is: its nodes, transport, folder, flags and faults.

Every other module of the simulator reads a ``SimSpec``; node/cli/sim.py builds it from the command line.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from swarm_node.node.sim.faults import SimFaults
from swarm_node.node.transport.carriers import carrier


@dataclass
class SimSpec:
    nodes: int  # every node, the control nodes included
    transport: str  # "hivemind" | "mqtt" | "libp2p" | "memory"
    run_dir: Path
    config: Path | None = None
    overrides: dict[str, str] = field(default_factory=dict)  # --section.key flags for every node (raw text)
    seed: int = 0
    progress: str = "auto"
    startup_timeout: float = 120.0
    faults: SimFaults = field(default_factory=SimFaults)
    # Models the node makes itself (the embedded one, a registry model, a .gguf file), prepared once
    # here before the nodes start: N nodes building one at once would each take N times as long.
    prepare_models: tuple[str, ...] = ()
    peer_ids: list[str] = field(default_factory=list)  # node i's peer id (identities made up front)
    roles: str = "full"  # "full", or "learner-workers": node0 a learner, the others its workers
    workers: int | None = None  # with learner-workers: only node1..node<workers> follow it, the rest are full nodes
    partition_start: float | None = None  # unix time the nodes were launched
    control: int = 0  # the last `control` nodes train alone (node/sim/control.py)
    control_flags: dict[str, str] = field(default_factory=dict)  # their flags on top of every node's


def is_control(spec: SimSpec, i: int) -> bool:
    """Whether node i is one of the simulation's isolated control nodes (the last ``control``)."""
    return i >= spec.nodes - spec.control


def node_name(spec: SimSpec, i: int) -> str:
    """Node i as the live table and the summary show it: ``node4 (control)`` for a control node."""
    return f"node{i}" + (" (control)" if is_control(spec, i) else "")


def node_log(spec: SimSpec, i: int) -> Path:
    """Where node i's output goes: its own node.log over hivemind, the one worker's nodes.log
    over memory (every node runs in that one process)."""
    return spec.run_dir / (f"node{i}/node.log" if processes(spec) else "nodes.log")


def processes(spec: SimSpec) -> bool:
    """Whether the nodes are processes of their own (hivemind, mqtt, libp2p) or one worker's (memory)."""
    return not carrier(spec.transport).in_process
