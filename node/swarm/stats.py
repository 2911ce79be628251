"""What the swarm exchange counts: refusals, envelopes and groups in and out, drops and errors,
since start. The trainer copies them into metrics and the status display (SwarmExchange.status).

Per-peer counters hold at most ``limits.MAX_TRACKED_PEERS`` peers (the rest are summed under
``OTHER_PEERS``): peer ids cost an attacker nothing to make.
"""

from __future__ import annotations

import collections
from dataclasses import dataclass, field

from swarm_node.node.swarm import limits

__all__ = ["SwarmStats", "bump"]


@dataclass
class SwarmStats:
    """Counters since start; the trainer copies them into metrics and the status display."""

    rejected: collections.Counter = field(default_factory=collections.Counter)
    envelopes_in: int = 0  # admitted envelopes
    groups_in: collections.Counter = field(default_factory=collections.Counter)  # by sender
    groups_used: collections.Counter = field(default_factory=collections.Counter)  # by sender
    dropped_stale: int = 0  # admitted groups that aged out of the window before use
    dropped_full: int = 0  # admitted groups evicted because the pool was full
    dropped_long: int = 0  # completions longer than this node trains on: not checked, not kept
    dropped_held_out: int = 0  # groups asking a question this node evaluates on (rewards/reserved.py)
    dropped_unknown_family: int = 0  # groups of a task source this node has not loaded (rewards/sources.py)
    unusable_batches: int = 0  # batches of nothing but such groups: not pooled (node/swarm/unusable.py)
    unusable_backed_off: int = 0  # times the carrier backed a sender of them off after a run of them
    envelopes_out: int = 0
    rollouts_out: int = 0
    publish_errors: int = 0
    heartbeat_errors: int = 0
    poll_errors: int = 0
    publish_skipped: int = 0  # rounds not published while the link was down
    publish_timeouts: int = 0  # publishes abandoned after publish_timeout
    internal_errors: int = 0  # a check itself failed: a bug, logged with its traceback

    def counts(self) -> dict:
        """The counters as the status and summary show them (the exchange adds the transport's
        refusals to ``rejected``)."""
        return {
            "peers_heard": len(self.groups_in),
            "peers_used": len(self.groups_used),
            "envelopes_in": self.envelopes_in,
            "envelopes_out": self.envelopes_out,
            "rollouts_out": self.rollouts_out,
            "groups_in": sum(self.groups_in.values()),
            "groups_used": sum(self.groups_used.values()),
            "groups_used_by_peer": dict(self.groups_used),
            "groups_in_by_peer": dict(self.groups_in),
            "dropped_stale": self.dropped_stale,
            "dropped_full": self.dropped_full,
            "dropped_long": self.dropped_long,
            "dropped_held_out": self.dropped_held_out,
            "dropped_unknown_family": self.dropped_unknown_family,
            "unusable_batches": self.unusable_batches,
            "unusable_backed_off": self.unusable_backed_off,
            "publish_errors": self.publish_errors,
            "heartbeat_errors": self.heartbeat_errors,
            "poll_errors": self.poll_errors,
            "publish_skipped": self.publish_skipped,
            "publish_timeouts": self.publish_timeouts,
            "internal_errors": self.internal_errors,
        }


def bump(counter: collections.Counter, key: str, n: int = 1) -> None:
    """Count per peer, with bounded memory: peer ids cost an attacker nothing to make."""
    # limits.MAX_TRACKED_PEERS is read at call time, so a test can lower it in one place.
    if key in counter or len(counter) < limits.MAX_TRACKED_PEERS:
        counter[key] += n
    else:
        counter[limits.OTHER_PEERS] += n
