"""The command line of each process ``swarm-node sim`` starts: a node's own flags (folder, seed,
role, its faults), how it joins, an adversary's and the memory worker's.

Pure: it builds lists of strings; node/sim/children.py runs them.
"""

from __future__ import annotations

import json
from typing import Any

from swarm_node.node.sim.spec import SimSpec, is_control
from swarm_node.node.transport.carriers import carrier

LISTEN_LOOPBACK = ["--swarm.host_maddrs", '["/ip4/127.0.0.1/tcp/0"]']
NO_NAT_TRAVERSAL = ["--swarm.use_relay", "false", "--swarm.nat_port_map", "false"]
ROLE_LAYOUTS = ("full", "learner-workers")


def flag_list(overrides: dict[str, str]) -> list[str]:
    out = []
    for k, v in overrides.items():
        out += [f"--{k}", v]
    return out


def flag_text(v: Any) -> str:
    """A config value as flag text the child parses back to the same value (TOML syntax)."""
    if isinstance(v, str):
        return v
    if isinstance(v, float) and (v != v or v in (float("inf"), float("-inf"))):
        return "nan" if v != v else ("inf" if v > 0 else "-inf")
    return json.dumps(v, ensure_ascii=False)


def role_flags(layout: str, i: int, learner_id: str, workers: int | None = None) -> dict[str, str]:
    """Node i's role flags: with ``learner-workers`` node0 publishes its weights and every other
    node follows them (node/run/roles.py); with ``workers`` set, only node1..node<workers>
    do, and the nodes after them are full nodes sharing beside them."""
    if layout == "full" or (workers is not None and i > workers):
        return {}
    if i == 0:
        return {"broadcast.role": "learner"}
    return {"broadcast.role": "worker", "broadcast.follow": learner_id}


def override_flags(spec: SimSpec, i: int) -> dict[str, str]:
    """Node i's ``[[node]]`` flags from the faults file, as flag text."""
    return {k: flag_text(v) for k, v in spec.faults.flags_of(i).items()}


def node_args(spec: SimSpec, i: int) -> list[str]:
    """Node i's flags after ``join`` and how it joins: its folder and seed, its role, and its
    faults (``[[node]]`` flags, latency, its side of a partition)."""
    node_dir = spec.run_dir / f"node{i}"
    args = ["--run.dir", str(node_dir), "--run.progress", "off", "--train.threads", "1",
            "--train.seed", str(spec.seed + i), "--run.plot", "false"]
    if spec.config is not None:
        args = ["--config", str(spec.config), *args]
    per_node = role_flags(spec.roles, i, spec.peer_ids[0] if spec.peer_ids else "", spec.workers)
    if is_control(spec, i):  # trains alone (node/sim/control.py)
        per_node |= spec.control_flags
    per_node |= override_flags(spec, i)
    port = spec.overrides.get("run.metrics_port")
    if port and port.lower() not in ("0", "none", "off", "null"):  # one port per node
        per_node["run.metrics_port"] = str(int(port) + i)
    for lat in spec.faults.latency:
        if lat.node == i:
            per_node |= {"faults.delay_seconds": flag_text(lat.delay_seconds),
                         "faults.jitter_seconds": flag_text(lat.jitter_seconds)}
    for part in spec.faults.partition:  # node i drops the other side's messages during the window
        mine = next((g for g in part.groups if i in g), None)
        if mine is not None and spec.partition_start is not None:
            others = [spec.peer_ids[j] for g in part.groups if g is not mine for j in g]
            start = spec.partition_start + part.after_seconds
            per_node |= {"faults.blocked_peers": json.dumps(others), "faults.blocked_from": flag_text(start),
                         "faults.blocked_until": flag_text(start + part.duration_seconds)}
    return args + flag_list({**spec.overrides, **per_node})


def join_flags(transport: str, maddr: str | None, broker_url: str | None) -> list[str]:
    """How every node joins: the bootstrap peer's address over hivemind and libp2p (listening on
    loopback only, no relays or port mapping), the simulator's broker over mqtt. ``join``'s
    default carrier goes unnamed."""
    c = carrier(transport)
    named = [] if c.join_default else ["--transport", transport]
    if c.joins_through_bootstrap:
        return [*named, "--bootstrap", maddr, *LISTEN_LOOPBACK, *(NO_NAT_TRAVERSAL if c.uses_nat_traversal else [])]
    return [*named, "--broker", broker_url]


def adversary_args(spec: SimSpec, j: int, how: list[str], broker_url: str | None) -> list[str]:
    """The ``swarm-node adversary`` command of ``[[malicious]]`` entry j; ``how`` is the nodes'
    ``join_flags``."""
    m = spec.faults.malicious[j]
    base = ["--config", str(spec.config)] if spec.config else []
    c = carrier(spec.transport)
    # The adversary has no --transport flag: its carrier is named as a config override.
    joined = how[2:] if how[:2] == ["--transport", spec.transport] else how
    adv_how = (["--swarm.transport", spec.transport, "--swarm.broker", broker_url] if c.needs_broker
               else ["--swarm.transport", spec.transport, *joined])
    return ["adversary", *adv_how, *base, *flag_list(spec.overrides), "--run.dir",
            str(spec.run_dir / f"adversary{j}"), "--attacks", ",".join(m.attacks)]


def worker_args(spec: SimSpec) -> list[str]:
    """The one ``swarm-node sim-worker`` process that runs every node over memory (its control
    nodes' flags and each node's ``[[node]]`` flags as JSON: the other flags are every node's)."""
    control = (["--control", str(spec.control), "--control-flags", json.dumps(spec.control_flags)]
               if spec.control else [])
    per_node = {str(i): f for i in range(spec.nodes) if (f := override_flags(spec, i))}
    return ["sim-worker", "--nodes", str(spec.nodes), "--run-dir", str(spec.run_dir), "--seed", str(spec.seed),
            *control, *(["--node-flags", json.dumps(per_node)] if per_node else []),
            *(["--config", str(spec.config)] if spec.config else []), *flag_list(spec.overrides)]
