"""Waiting between tries: one back-off rule for every carrier and the node's link to its swarm.

A wait starts at ``first`` and doubles at each failure, never above ``cap``: the join retries
(hivemind's daemon start, the libp2p bootstrap dial, the MQTT broker connect; uncapped, a few
tries), the reconnects (``SwarmLink``'s rejoin, the MQTT link's reconnect: 1 s doubling to 30 s)
and the rounds a hivemind publisher or host is skipped after a bad body (2 rounds doubling to 64).

``backoff_delay`` is the schedule (pure), ``Backoff`` walks it failure by failure, and ``retry``
is the one join loop: try, wait, try again, then give up with the last failure.
"""

from __future__ import annotations

import asyncio
import math
from dataclasses import dataclass, field
from typing import Awaitable, Callable, TypeVar

__all__ = ["JOIN_RETRIES", "JOIN_BACKOFF_S", "RECONNECT_FIRST_S", "RECONNECT_MAX_S", "backoff_delay", "Backoff",
           "TryAgain", "retry"]

JOIN_RETRIES = 5  # tries after the first when joining (the daemon, the bootstrap peers, the broker)
JOIN_BACKOFF_S = 2.0  # the first wait between them; doubles each retry
RECONNECT_FIRST_S = 1.0  # a lost link's first wait before trying again ...
RECONNECT_MAX_S = 30.0  # ... doubling up to this

T = TypeVar("T")


def backoff_delay(first: float, failures: int, cap: float = math.inf) -> float:
    """The wait after ``failures`` earlier failures: ``first``, doubled for each, at most ``cap``
    (for ``first <= cap``, the same as ``min(cap, first * 2 ** failures)``, without its overflow)."""
    delay = first
    for _ in range(failures):
        if delay >= cap:
            break
        delay *= 2
    return min(cap, delay)


@dataclass
class Backoff:
    """The waits of one run of failures: ``next()`` is the wait after one more, ``reset()`` after
    a success starts over from ``first``."""

    first: float = RECONNECT_FIRST_S
    cap: float = RECONNECT_MAX_S
    failures: int = field(default=0, init=False)

    def next(self) -> float:
        wait = backoff_delay(self.first, self.failures, self.cap)
        self.failures += 1
        return wait

    def reset(self) -> None:
        self.failures = 0


class TryAgain(Exception):
    """An attempt failed in a way that waiting may fix; its text says what went wrong."""


async def retry(attempt: Callable[[], Awaitable[T]], *, retries: int, first_delay: float,
                before_wait: Callable[[int, TryAgain, float], None]) -> T:
    """``await attempt()`` until it returns, at most ``retries + 1`` times, waiting ``first_delay``
    (doubling) between tries. An attempt raising ``TryAgain`` is tried again, and the last one's
    ``TryAgain`` is raised; any other exception ends the loop at once. ``before_wait(n, failure,
    wait)`` hears each failure that will be retried (``n``: the attempt that failed, from 0)."""
    waits = Backoff(first_delay, cap=math.inf)
    n = 0
    while True:
        try:
            return await attempt()
        except TryAgain as failure:
            if n >= retries:
                raise
            wait = waits.next()
            before_wait(n, failure, wait)
        await asyncio.sleep(wait)
        n += 1
