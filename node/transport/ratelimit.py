"""An upload cap every node applies to what it sends, and request budgets: token buckets.

The broadcast benchmark caps every node's upload at the same U in the application, so its numbers
mean the same on any machine (loopback is otherwise far faster than any home uplink); a node
can also use it to keep weight forwarding from eating the uplink its rollouts need.
"""

from __future__ import annotations

import asyncio
import time

__all__ = ["TokenBucket"]


class TokenBucket:
    """``rate`` bytes a second with bursts up to ``burst`` bytes; ``take(n)`` waits for n tokens.
    Takers are served in arrival order (one lock), so a big write cannot starve small ones
    forever and the long-run rate holds however many streams share the bucket."""

    def __init__(self, rate: float, burst: float | None = None):
        if rate <= 0:
            raise ValueError("rate must be positive")
        self.rate = float(rate)
        self.burst = float(burst if burst is not None else max(rate / 20, 64 * 1024))
        self._tokens = self.burst
        self._stamp = time.monotonic()
        self._lock = asyncio.Lock()
        self._normal = 0  # normal-priority takers inside take()
        self.taken = 0  # bytes sent through this bucket

    def _refill(self) -> None:
        now = time.monotonic()
        self._tokens = min(self.burst, self._tokens + (now - self._stamp) * self.rate)
        self._stamp = now

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
        async with self._lock:
            need = float(n)
            while True:
                self._refill()
                # A write bigger than the burst goes through on a full bucket and leaves a debt:
                # the long-run rate is what matters, and writes are sliced small anyway.
                if self._tokens >= min(need, self.burst):
                    self._tokens -= need
                    self.taken += n
                    return
                await asyncio.sleep((min(need, self.burst) - self._tokens) / self.rate)

    def try_take(self, n: float = 1.0) -> bool:
        """Take ``n`` tokens now if the bucket has them (a request budget: refuse, do not wait)."""
        self._refill()
        if self._tokens < n:
            return False
        self._tokens -= n
        self.taken += int(n)
        return True
