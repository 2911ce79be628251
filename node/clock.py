"""Rounds from a shared clock: every node derives the current round from wall time alone.

Round ``r`` is the interval ``[epoch + r·T, epoch + (r+1)·T)`` of unix time, with ``T`` the
round length. Nodes never negotiate a round counter, so a node that was slow, paused or restarted
simply computes the current round and joins it (the rounds it missed are skipped and counted)
instead of drifting behind the swarm. Clocks are assumed NTP-synchronised to well under a round;
envelopes carry signed timestamps and the verifier rejects those too far from the local clock.
"""

from __future__ import annotations

import asyncio
import math
import time
from dataclasses import dataclass
from typing import Callable

__all__ = ["RoundClock"]


@dataclass(frozen=True)
class RoundClock:
    round_seconds: float
    epoch: float = 0.0
    now: Callable[[], float] = time.time

    def __post_init__(self) -> None:
        if not (self.round_seconds > 0 and math.isfinite(self.round_seconds)):
            raise ValueError(f"round_seconds must be a positive number, got {self.round_seconds}")

    def round_at(self, t: float) -> int:
        return max(0, math.floor((t - self.epoch) / self.round_seconds))

    def current(self) -> int:
        return self.round_at(self.now())

    def start_of(self, r: int) -> float:
        return self.epoch + r * self.round_seconds

    def end_of(self, r: int) -> float:
        return self.start_of(r + 1)

    async def wait_for(self, r: int) -> None:
        """Sleep until round ``r`` has started (returns at once if it already has)."""
        while (delay := self.start_of(r) - self.now()) > 0:
            await asyncio.sleep(delay)
