"""Publish-to-available latency: one publisher and N receivers, each running the node's receive
loop; a trial is a fresh signed envelope in a round of its own, timed from signing until each
receiver has admitted it; with the CPU the process and the machine spent meanwhile."""

from __future__ import annotations

import argparse
import asyncio
import random
import statistics
import time
from dataclasses import dataclass, field

import numpy as np

from common.proc import busy_share, machine_jiffies
from swarm_node.node.clock import RoundClock
from swarm_node.node.swarm.exchange import SwarmExchange
from swarm_node.policies.policy import Policy
from swarm_node.protocol.identity import Identity
from swarm_node.protocol.messages import RolloutRecord
from swarm_bench.nodes import ROUND_SECONDS, close_all, make_exchange, make_transports


@dataclass
class Publication:
    """One trial: the envelope, when publishing began, and when each receiver admitted it."""

    data: bytes
    t0: float
    n: int
    arrivals: dict[int, float] = field(default_factory=dict)
    done: asyncio.Event = field(default_factory=asyncio.Event)
    publish_s: float = float("nan")  # until transport.publish returned

    def arrive(self, idx: int, t: float) -> None:
        self.arrivals.setdefault(idx, t - self.t0)
        if len(self.arrivals) == self.n:
            self.done.set()


@dataclass
class SwarmRun:
    """Shared state of one swarm: the trial in flight and what the receivers observed."""

    current: Publication | None = None
    empty_poll_s: list[float] = field(default_factory=list)  # duration of polls that found nothing
    poll_errors: int = 0


async def receive(idx: int, ex: SwarmExchange, run: SwarmRun, poll: float) -> None:
    """The node's receive loop (``SwarmExchange.poll_once`` + sleep), timestamping admissions.

    The sleep is jittered, uniform in [poll/2, 3 poll/2]: separate nodes poll at independent
    phases, but nodes sharing one event loop with exact intervals phase-lock (seen over hivemind:
    two receivers' polls starting within ~2 ms of each other for seconds on end; over memory they
    start together and stay together), which would make "all N" look like "one peer". Mean
    interval unchanged; the mean wait for the next poll becomes 13/24 poll instead of poll/2.
    """
    while True:
        t = time.perf_counter()
        try:
            deliveries = await ex.transport.poll(ex.window())
        except Exception:  # noqa: BLE001 - as the node does: count and keep polling
            run.poll_errors += 1
            deliveries = []
        for d in deliveries:
            if ex.admit(d) and run.current is not None and d.data == run.current.data:
                run.current.arrive(idx, time.perf_counter())
        if not deliveries:
            run.empty_poll_s.append(time.perf_counter() - t)
        await asyncio.sleep(poll * random.uniform(0.5, 1.5))


async def publish_trial(pub: SwarmExchange, run: SwarmRun, records: list[RolloutRecord], n: int,
                        gap: float, timeout: float) -> Publication:
    """Sign and publish a fresh envelope ``gap`` s into the next round, then wait until all ``n``
    receivers admitted it. The first half of a round at most: with --max-round-lag 0 receivers stop
    polling a round the moment it ends, and a batch published just before would never arrive."""
    clock = pub.clock
    await clock.wait_for(clock.current() + 1)
    await asyncio.sleep(min(gap, clock.round_seconds / 2))
    t0 = time.perf_counter()
    r = clock.current()
    data = pub.make_envelope(r, 0, records)
    run.current = p = Publication(data, t0, n)
    await pub.transport.publish(r, data, (pub.max_round_lag + 2) * clock.round_seconds)
    p.publish_s = time.perf_counter() - t0
    try:
        await asyncio.wait_for(p.done.wait(), timeout)
    except asyncio.TimeoutError:
        pass  # counted as missing arrivals
    return p


async def latency(kind: str, n: int, policy: Policy, records: list[RolloutRecord],
                  args: argparse.Namespace) -> dict:
    """One publisher and ``n`` receivers over ``kind``; ``--warmup`` + ``--trials`` publications."""
    clock = RoundClock(ROUND_SECONDS)
    ids = [Identity.generate() for _ in range(n + 1)]
    t_setup = time.perf_counter()
    ts, stop_boot = await make_transports(kind, ids)
    setup_s = time.perf_counter() - t_setup
    exs = [make_exchange(t, i, policy, clock, args.poll, args.max_round_lag) for t, i in zip(ts, ids)]
    for ex in exs:  # as SwarmExchange.start, which would also start a receive loop of its own
        ex._loop = asyncio.get_running_loop()
        ex.transport.set_gate(ex.gate)  # libp2p: the topic validator; the others have no gate
    pub, receivers = exs[0], exs[1:]
    run = SwarmRun()
    tasks = [asyncio.create_task(receive(k, ex, run, args.poll)) for k, ex in enumerate(receivers)]
    trials: list[Publication] = []
    # CPU of this one process (all nodes' Python side) over wall time: near 100% of a core, the
    # receivers' polls queue behind each other in the shared event loop.
    cpu0, wall0, machine0 = time.process_time(), time.perf_counter(), machine_jiffies()
    try:
        for _ in range(args.warmup + args.trials):
            # A random gap of up to 3 receive cycles puts the publication at a random point of
            # every receiver's cycle; right after the last arrival the phases would be fixed.
            cycle = args.poll + (statistics.median(run.empty_poll_s[-50:]) if run.empty_poll_s else 0.0)
            trials.append(await publish_trial(pub, run, records, n, random.uniform(0, 3 * cycle), args.timeout))
        run.current = None
        cpu_share = (time.process_time() - cpu0) / (time.perf_counter() - wall0)
        machine_share = busy_share(machine0, machine_jiffies())
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        await close_all(ts, stop_boot)
    counted = trials[args.warmup:]
    complete = [p for p in counted if len(p.arrivals) == n]
    all_n = [max(p.arrivals.values()) for p in complete]
    per_peer = [t for p in counted for t in p.arrivals.values()]
    rejected = sum(sum(ex.stats.rejected.values()) + sum(ex.transport.rejected.values()) for ex in receivers)
    return {
        "transport": kind, "peers": n, "trials": len(counted), "warmup": args.warmup,
        "setup_s": setup_s, "process_cpu_share": cpu_share,
        "machine_cpu_share": machine_share,
        "incomplete_trials": len(counted) - len(complete),
        "median_all_s": statistics.median(all_n) if all_n else None,
        "p95_all_s": float(np.percentile(all_n, 95)) if all_n else None,
        "median_per_peer_s": statistics.median(per_peer) if per_peer else None,
        "median_publish_call_s": statistics.median(p.publish_s for p in counted),
        "median_empty_poll_s": statistics.median(run.empty_poll_s) if run.empty_poll_s else None,
        "warmup_all_s": [max(p.arrivals.values(), default=None) for p in trials[:args.warmup]],
        "rejected": rejected, "poll_errors": run.poll_errors,
        "fetch_failures": sum(getattr(ex.transport, "fetch_failures", 0) for ex in receivers),
        "all_s": all_n, "per_peer_s": per_peer,
    }
