"""Fault injection on a node's receiving side: added latency and jitter, and partitions.

Wraps any ``Transport`` (``swarm-node sim`` turns it on through the ``[faults]`` config section).
Deliveries from peers are held back by ``delay_seconds`` plus a uniform jitter, as if this
node's links were slow; during a partition window, deliveries (rollouts and heartbeats) from the
peers on the other side are dropped. Both act where the node receives: the DHT underneath stays
one network, so this emulates a partition as the node experiences it, not a routing split.
"""

from __future__ import annotations

import heapq
import itertools
import random
import time
from dataclasses import dataclass, field
from typing import Iterable

from swarm_node.node.transport.base import Delivery, Transport

__all__ = ["FaultyTransport"]


@dataclass
class FaultyTransport(Transport):
    inner: Transport = None  # type: ignore[assignment]
    delay_seconds: float = 0.0
    jitter_seconds: float = 0.0
    blocked_peers: frozenset = frozenset()
    blocked_from: float = 0.0  # unix time window of the partition
    blocked_until: float = 0.0
    seed: int = 0
    dropped: int = field(default=0, init=False)
    delayed: int = field(default=0, init=False)
    _held: list = field(default_factory=list, init=False, repr=False)  # heap of (release, n, kind, delivery)
    _count: itertools.count = field(default_factory=itertools.count, init=False, repr=False)
    _rng: random.Random = field(default=None, init=False, repr=False)

    def __post_init__(self) -> None:
        self.rejected = self.inner.rejected  # the inner transport's refusals are this node's
        self._rng = random.Random(self.seed)

    async def start(self) -> None:
        await self.inner.start()

    async def publish(self, round: int, data: bytes, expires_in: float) -> None:
        await self.inner.publish(round, data, expires_in)

    async def publish_as(self, publisher: str, round: int, data: bytes, expires_in: float) -> None:
        await self.inner.publish_as(publisher, round, data, expires_in)

    async def announce(self, data: bytes, expires_in: float) -> None:
        await self.inner.announce(data, expires_in)

    def partitioned(self, publisher: str, now: float) -> bool:
        return publisher in self.blocked_peers and self.blocked_from <= now < self.blocked_until

    def _through(self, kind: str, deliveries: list[Delivery]) -> list[Delivery]:
        now = time.time()
        for d in deliveries:
            if self.partitioned(d.publisher, now):
                self.dropped += 1
                continue
            wait = self.delay_seconds + self._rng.uniform(0, self.jitter_seconds)
            if wait > 0:
                self.delayed += 1
            heapq.heappush(self._held, (now + wait, next(self._count), kind, d))
        out, keep = [], []
        while self._held and self._held[0][0] <= now:
            item = heapq.heappop(self._held)
            (out if item[2] == kind else keep).append(item)
        for item in keep:
            heapq.heappush(self._held, item)
        return [item[3] for item in out]

    async def poll(self, rounds: Iterable[int], want: int | None = None,
                   max_size: int | None = None) -> list[Delivery]:
        return self._through("rollouts", await self.inner.poll(rounds, want, max_size))

    def vouch(self, publisher: str) -> None:
        self.inner.vouch(publisher)

    def admitted(self, publisher: str, round: int) -> None:
        self.inner.admitted(publisher, round)

    def is_own_address(self, publisher: str, addr: str) -> bool:
        return self.inner.is_own_address(publisher, addr)

    async def broadcast_parts(self, identity, source: str, upload):
        return await self.inner.broadcast_parts(identity, source, upload)

    def set_gate(self, gate) -> None:
        self.inner.set_gate(gate)

    def distrust(self, publisher: str, round: int) -> bool:
        return self.inner.distrust(publisher, round)

    async def poll_announcements(self) -> list[Delivery]:
        return self._through("heartbeats", await self.inner.poll_announcements())

    async def close(self) -> None:
        await self.inner.close()

    def buffer_sizes(self) -> dict[str, int]:
        return self.inner.buffer_sizes()

    def info(self) -> dict:
        now = time.time()
        return {**self.inner.info(), "fault_dropped": self.dropped, "fault_delayed": self.delayed,
                "fault_delay_s": self.delay_seconds, "fault_jitter_s": self.jitter_seconds,
                "partitioned": bool(self.blocked_peers) and self.blocked_from <= now < self.blocked_until}
