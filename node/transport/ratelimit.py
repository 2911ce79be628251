"""Token buckets, the one home of the rule: an upload cap every node applies to what it sends,
request budgets, and the gossip check budget's share for strangers.

The broadcast benchmark caps every node's upload at the same U in the application, so its numbers
mean the same on any machine (loopback is otherwise far faster than any home uplink); a node
can also use it to keep weight forwarding from eating the uplink its rollouts need.

``Bucket`` is the rule itself, pure (the caller passes the time in, so it is tested with
hand-picked times); ``TokenBucket`` runs it on the monotonic clock for asyncio takers.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass

__all__ = ["Bucket", "TokenBucket"]


@dataclass
class Bucket:
    """``tokens`` (at most ``burst``) refilled at ``rate`` a second, as of time ``stamp``. Time
    that runs backwards adds nothing and never moves ``stamp`` back."""

    rate: float
    burst: float
    tokens: float
    stamp: float

    @classmethod
    def full(cls, rate: float, burst: float, now: float) -> "Bucket":
        return cls(rate, burst, burst, now)

    def refill(self, now: float) -> None:
        self.tokens = min(self.burst, self.tokens + max(0.0, now - self.stamp) * self.rate)
        self.stamp = max(self.stamp, now)

    def try_take(self, n: float, now: float) -> bool:
        """Take ``n`` tokens if the bucket holds them at ``now``; else take nothing."""
        self.refill(now)
        if self.tokens < n:
            return False
        self.tokens -= n
        return True


class TokenBucket:
    """``rate`` bytes a second with bursts up to ``burst`` bytes; ``take(n)`` waits for n tokens.
    Takers are served in arrival order (one lock), so a big write cannot starve small ones
    forever and the long-run rate holds however many streams share the bucket."""

    def __init__(self, rate: float, burst: float | None = None):
        if rate <= 0:
            raise ValueError("rate must be positive")
        self.rate = float(rate)
        self.burst = float(burst if burst is not None else max(rate / 20, 64 * 1024))
        self._bucket = Bucket.full(self.rate, self.burst, time.monotonic())
        self._lock = asyncio.Lock()
        self._normal = 0  # normal-priority takers inside take()
        self.taken = 0  # bytes sent through this bucket

    async def take(self, n: int, low: bool = False) -> None:
        """``low``: go only while no normal taker is waiting (a relay's uploads to peers the
        topology did not give it yield to its own children's, so a late follower hung under it
        does not halve the chain below it). A normal taker waits at most one slice behind a low one."""
        if low:
            while self._normal:
                await asyncio.sleep(0.005)
        else:
            self._normal += 1
        try:
            await self._take(n)
        finally:
            if not low:
                self._normal -= 1

    async def _take(self, n: int) -> None:
        bucket = self._bucket
        async with self._lock:
            need = float(n)
            while True:
                bucket.refill(time.monotonic())
                # A write bigger than the burst goes through on a full bucket and leaves a debt:
                # the long-run rate is what matters, and writes are sliced small anyway.
                if bucket.tokens >= min(need, self.burst):
                    bucket.tokens -= need
                    self.taken += n
                    return
                await asyncio.sleep((min(need, self.burst) - bucket.tokens) / self.rate)

    def try_take(self, n: float = 1.0) -> bool:
        """Take ``n`` tokens now if the bucket has them (a request budget: refuse, do not wait)."""
        if not self._bucket.try_take(n, time.monotonic()):
            return False
        self.taken += int(n)
        return True
