"""The ``--faults`` file of ``swarm-node sim``: its schema, and the checks it must pass before a run.

A faults file holds ``[[node]]`` (per-node flags), ``[[kill]]``, ``[[malicious]]``,
``[[partition]]``, ``[[latency]]`` and ``[[bootstrap_outage]]`` tables (docs/running.md).
Per-node flags, partitions and latency become each node's own flags (node/sim/argv.py); kills
(at a step, or at a time) are carried out by the simulator (node/sim/kills.py); each malicious
entry is one ``swarm-node adversary`` process, for the whole run or for a window of it, and a
bootstrap outage stops the bootstrap peer for a while and restarts it on the same address
(node/sim/timed.py). Over the memory transport only ``[[node]]`` flags apply (the one worker
process gives each node its own).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Optional

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from swarm_node.node.errors import ConfigError
from swarm_node.node.config.config import read_toml
from swarm_node.node.sim.adversary import ATTACKS, DEFAULT_ATTACKS, RAW_ATTACKS, SYBIL_ATTACKS
from swarm_node.node.transport.carriers import carrier


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)


class NodeOverride(_Strict):
    index: int = Field(ge=0, description="which node")
    flags: dict[str, Any] = Field(description="--section.key values for this node only, e.g. "
                                               "train.behaviour_lag = 8 (stale) or model.name = PATH (heterogeneous)")


class KillFault(_Strict):
    node: int = Field(ge=0)
    at_step: Optional[int] = Field(None, ge=1, description="kill -9 the node once it has trained this many steps")
    at_seconds: Optional[float] = Field(None, ge=0, description="or: kill -9 it this long after the nodes are launched "
                                                               "(whatever step it is at; one of at_step, at_seconds)")
    down_seconds: float = Field(5.0, ge=0, description="then restart it with --resume after this long")

    @model_validator(mode="after")
    def _one_trigger(self) -> "KillFault":
        if (self.at_step is None) == (self.at_seconds is None):
            raise ValueError(f"[[kill]] node {self.node}: give at_step or at_seconds (one of them)")
        return self


class PartitionFault(_Strict):
    groups: list[list[int]] = Field(description="node indices on each side, e.g. [[0, 1], [2, 3]]")
    after_seconds: float = Field(ge=0, description="the partition starts this long after the nodes are launched")
    duration_seconds: float = Field(gt=0, description="and lasts this long")


class LatencyFault(_Strict):
    node: int = Field(ge=0)
    delay_seconds: float = Field(ge=0, description="every delivery to this node is held this long")
    jitter_seconds: float = Field(0.0, ge=0, description="plus up to this long, uniformly at random")


class MaliciousFault(_Strict):
    attacks: list[str] = Field(default_factory=lambda: list(DEFAULT_ATTACKS), min_length=1, description="attacks to cycle through (default: the envelope attacks every honest node must refuse; node/sim/adversary/ lists all, including the DHT, flood and admitted-by-design ones)")
    after_seconds: float = Field(0.0, ge=0, description="the adversary starts this long after the nodes are launched")
    duration_seconds: Optional[float] = Field(None, gt=0, description="and is killed after this long (an attack "
                                                                      "phase); none = it runs to the end")


class BootstrapOutageFault(_Strict):
    after_seconds: float = Field(ge=0, description="the bootstrap peer is stopped (kill -9) this long after the nodes "
                                                   "are launched")
    duration_seconds: float = Field(gt=0, description="and restarted on the same address and identity after this "
                                                      "long (joins meanwhile go through each node's peer cache)")


class SimFaults(_Strict):
    """A ``--faults`` file: ``[[node]]``, ``[[kill]]``, ``[[malicious]]``, ``[[partition]]`` and
    ``[[latency]]`` and ``[[bootstrap_outage]]`` tables (docs/running.md)."""

    node: list[NodeOverride] = []
    kill: list[KillFault] = []
    malicious: list[MaliciousFault] = []
    partition: list[PartitionFault] = []
    latency: list[LatencyFault] = []
    bootstrap_outage: list[BootstrapOutageFault] = []

    def flags_of(self, i: int) -> dict:
        """Node i's ``[[node]]`` flags, typed as the file gave them (later tables win)."""
        return {k: v for o in self.node if o.index == i for k, v in o.flags.items()}

    def check(self, n_nodes: int, transport: str) -> None:
        named = ([x.index for x in self.node] + [k.node for k in self.kill] + [x.node for x in self.latency]
                 + [i for p in self.partition for g in p.groups for i in g])
        bad = sorted({i for i in named if i >= n_nodes})
        if bad:
            raise ConfigError(f"faults name nodes {bad}, but there are only {n_nodes} (node0..node{n_nodes - 1})")
        unknown = [a for m in self.malicious for a in m.attacks if a not in ATTACKS]
        if unknown:
            raise ConfigError(f"unknown attacks {unknown}; choose from {', '.join(ATTACKS)}")
        if len(self.partition) > 1:
            raise ConfigError("one [[partition]] at a time is supported")
        for p in self.partition:
            members = [i for g in p.groups for i in g]
            if len(p.groups) < 2 or len(members) != len(set(members)):
                raise ConfigError(f"[[partition]] groups {p.groups}: at least two groups, no node in two")
        swarm_carrier = carrier(transport)
        if self.bootstrap_outage and not swarm_carrier.joins_through_bootstrap:
            raise ConfigError("[[bootstrap_outage]] stops the bootstrap peer: use it with --transport hivemind or libp2p")
        # [[node]] flags are only each node's config, which the memory simulation's one worker applies
        # too (node/sim/worker.py); the rest act on processes and on what crosses a real carrier.
        if (self.kill or self.malicious or self.partition or self.latency or self.bootstrap_outage) \
                and swarm_carrier.in_process:
            raise ConfigError("kills, malicious peers, partitions and latency need --transport hivemind, mqtt or libp2p "
                              "(the memory simulation runs every node in one process; [[node]] flags work over it)")
        dht = sorted({a for m in self.malicious for a in m.attacks if a in RAW_ATTACKS + SYBIL_ATTACKS})
        if dht and not swarm_carrier.has_dht_index:
            raise ConfigError(f"attacks {dht} write into the hivemind DHT: use them with --transport hivemind")


def load_faults(path: Path | None) -> SimFaults:
    if path is None:
        return SimFaults()
    data = read_toml(path, "faults file")
    try:
        return SimFaults.model_validate(data)
    except ValidationError as e:
        raise ConfigError(f"faults file {path}: {e}") from e
