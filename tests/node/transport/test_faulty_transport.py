"""Receiving-side fault injection: latency/jitter and partitions (over the in-memory hub)."""

from __future__ import annotations

import asyncio
import time

from swarm_node.node.transport.faulty import FaultyTransport
from swarm_node.node.transport.memory import MemoryHub, MemoryTransport


def pair(**faults):
    hub = MemoryHub()
    a = MemoryTransport(swarm="s", publisher="sn1a", hub=hub)
    b = FaultyTransport(swarm="s", publisher="sn1b", inner=MemoryTransport(swarm="s", publisher="sn1b", hub=hub),
                        **faults)
    return a, b


def test_latency_holds_deliveries_back():
    a, b = pair(delay_seconds=0.3, jitter_seconds=0.1)

    async def go():
        await a.publish(1, b"x", 60)
        t0 = time.time()
        first = await b.poll([1])
        while not (got := await b.poll([1])):
            await asyncio.sleep(0.02)
        return first, got, time.time() - t0

    first, got, waited = asyncio.run(go())
    assert first == [] and [d.data for d in got] == [b"x"]
    assert 0.3 <= waited < 0.6
    assert b.delayed == 1 and b.info()["fault_delay_s"] == 0.3


def test_partition_drops_the_other_side_only_inside_its_window():
    now = time.time()
    a, b = pair(blocked_peers=frozenset({"sn1a"}), blocked_from=now - 1, blocked_until=now + 0.5)

    async def go():
        await a.publish(1, b"during", 60)
        await a.announce(b"hb", 60)
        during = await b.poll([1]), await b.poll_announcements()
        await asyncio.sleep(0.6)
        await a.publish(2, b"after", 60)
        after = await b.poll([2])
        return during, after

    (rollouts, heartbeats), after = asyncio.run(go())
    assert rollouts == [] and heartbeats == [] and b.dropped == 2
    assert [d.data for d in after] == [b"after"]
    assert not b.info()["partitioned"]
