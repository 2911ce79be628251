"""What a broadcast role may read and call of its node: one typed context the trainer builds once.

A role (node/run/roles.py) publishes or follows weights around the trainer's steps; it
needs a few of the node's settings, its policy and its connection, and to read (never set) the
learner's version, the step and whether a stop was asked. Handing it this instead of the node
keeps the role from reaching into anything else, and lets a test build a role's world directly.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Protocol

from swarm_node.node.transport.base import Transport
from swarm_node.policies.policy import Policy
from swarm_node.protocol.identity import Identity

__all__ = ["RoleSettings", "RoleContext"]


class RoleSettings(Protocol):
    """What a role reads of the node's ``[broadcast]`` section: the section itself is passed
    (node/config/config.py ``BroadcastConfig`` holds the defaults and checks, in one place)."""

    follow: str  # worker: the learner's peer id
    publish_every: int  # learner: steps between versions
    max_staleness: int  # versions a worker's rollouts may lag
    fanout: int  # learner: children per node in the relay tree
    upload_mbps: float  # cap on uploaded chunks, MB/s (0: none)
    learner_timeout: float  # worker: seconds waiting with no sign of the learner before it stops (0: never)


@dataclass(frozen=True)
class RoleContext:
    """Everything a role reads or calls: settings and parts by value, the node's changing state
    through read-only callables."""

    settings: RoleSettings
    swarm_name: str
    run_dir: Path
    policy: Policy | None
    transport: Transport | None  # the swarm's connection, which the broadcast shares
    identity: Identity | None
    learner_version: Callable[[], int]
    step: Callable[[], int]
    stop_requested: Callable[[], bool]
    set_phase: Callable[[str, str], None]  # status.json's phase and its detail
    after_apply: Callable[[], None] | None = None  # a worker: after each applied version (vLLM's sync)
    heard_at: Callable[[str], float | None] = lambda _peer: None  # a peer's latest verified heartbeat's stamp
    link_up: Callable[[], bool] = lambda: True  # whether the node's swarm link is up (it hears its peers)

    @property
    def peer_id(self) -> str:
        assert self.identity is not None, "a broadcast role runs in a swarm"
        return self.identity.peer_id
