"""Admission throughput: envelopes per second one node admits, through ``Verifier.verify`` alone
and through the full ``SwarmExchange.admit``, timed in chunks."""

from __future__ import annotations

import time

from swarm_node.node.clock import RoundClock
from swarm_node.node.transport.base import Delivery
from swarm_node.node.transport.memory import MemoryHub, MemoryTransport
from swarm_node.policies.policy import Policy
from swarm_node.protocol.identity import Identity
from swarm_node.protocol.messages import RolloutRecord
from swarm_node.protocol.signing import Verifier, VerifyResult, envelope_from_bytes
from swarm_bench.nodes import NODE_POLL_SECONDS, SWARM, make_exchange

CHUNKS = 10


def timed_chunks(fn, items: list, chunks: int = CHUNKS) -> tuple[list[float], list]:
    """Run ``fn`` over ``items`` in ``chunks`` timed slices; returns the slice times and results."""
    times, out = [], []
    size = -(-len(items) // chunks)
    for k in range(0, len(items), size):
        part = items[k:k + size]
        t0 = time.perf_counter()
        out += [fn(x) for x in part]
        times.append(time.perf_counter() - t0)
    return times, out


def verification(policy: Policy, records: list[RolloutRecord], n: int) -> dict:
    """Envelopes/s through ``Verifier.verify`` alone and through the full ``SwarmExchange.admit``."""
    clock = RoundClock(3600.0)  # one round for the whole test: no envelope goes stale
    sender = Identity.generate()
    pub = make_exchange(MemoryTransport(swarm=SWARM, publisher=sender.peer_id, hub=MemoryHub()),
                        sender, policy, clock, NODE_POLL_SECONDS, 4)
    r = clock.current()
    blobs = [pub.make_envelope(r, 0, records) for _ in range(n)]  # distinct seq, nonce, timestamp

    envs = [envelope_from_bytes(b) for b in blobs]  # parsed outside the timer: (a) is verify alone
    verifier = Verifier()
    v_times, verdicts = timed_chunks(verifier.verify, envs)

    me = Identity.generate()
    rx = make_exchange(MemoryTransport(swarm=SWARM, publisher=me.peer_id, hub=MemoryHub()),
                       me, policy, clock, NODE_POLL_SECONDS, 4)
    deliveries = [Delivery(r, sender.peer_id, b) for b in blobs]

    def admit_fresh(d: Delivery) -> int:
        # All envelopes come from one sender in one round, and a node admits one batch per
        # sender and round: forget that pair so each envelope goes through every check.
        rx._batches.clear()
        return rx.admit(d)

    a_times, admitted = timed_chunks(admit_fresh, deliveries)

    return {
        "envelopes": n, "envelope_bytes": len(blobs[0]),
        "verify": {"accepted": sum(v is VerifyResult.ACCEPTED for v in verdicts),
                   "msgs_per_s": n / sum(v_times), "us_per_msg": sum(v_times) / n * 1e6,
                   "chunk_s": v_times},
        "admit": {"accepted": sum(a > 0 for a in admitted), "rejected": dict(rx.stats.rejected),
                  "msgs_per_s": n / sum(a_times), "us_per_msg": sum(a_times) / n * 1e6,
                  "records_per_s": n * len(records) / sum(a_times), "chunk_s": a_times},
    }
