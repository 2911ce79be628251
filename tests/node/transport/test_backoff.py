"""The one back-off rule (node/transport/backoff.py), by hand."""

from __future__ import annotations

import asyncio
import math

import pytest

from swarm_node.node.transport.backoff import (JOIN_BACKOFF_S, RECONNECT_FIRST_S, RECONNECT_MAX_S, Backoff, TryAgain,
                                    backoff_delay, retry)


def test_the_schedule_doubles_from_the_first_wait_up_to_the_cap():
    assert [backoff_delay(1.0, k, 30.0) for k in range(7)] == [1.0, 2.0, 4.0, 8.0, 16.0, 30.0, 30.0]
    assert [backoff_delay(2.0, k) for k in range(4)] == [2.0, 4.0, 8.0, 16.0]  # join: no cap
    # A hivemind publisher's back-off in rounds: 2 doubling to 64, whole rounds.
    assert [backoff_delay(2, k, 64) for k in range(7)] == [2, 4, 8, 16, 32, 64, 64]
    assert backoff_delay(1.0, 10_000, 30.0) == 30.0  # a days-long outage: no overflow
    assert backoff_delay(1.0, 3, math.inf) == 8.0


def test_a_backoff_walks_the_schedule_and_starts_over_after_a_success():
    b = Backoff()
    assert (b.first, b.cap) == (RECONNECT_FIRST_S, RECONNECT_MAX_S) == (1.0, 30.0)
    assert [b.next() for _ in range(7)] == [1.0, 2.0, 4.0, 8.0, 16.0, 30.0, 30.0]
    b.reset()
    assert b.next() == 1.0


def test_retry_tries_again_on_try_again_only_and_gives_up_with_the_last_failure():
    heard = []
    calls = []

    async def flaky():
        calls.append(1)
        if len(calls) < 3:
            raise TryAgain(f"failure {len(calls)}")
        return "joined"

    got = asyncio.run(retry(flaky, retries=2, first_delay=0.01,
                            before_wait=lambda n, e, wait: heard.append((n, str(e), wait))))
    assert got == "joined" and heard == [(0, "failure 1", 0.01), (1, "failure 2", 0.02)]

    calls.clear()
    heard.clear()

    async def never():
        calls.append(1)
        raise TryAgain("no one answered")

    with pytest.raises(TryAgain, match="no one answered"):
        asyncio.run(retry(never, retries=1, first_delay=0.01, before_wait=lambda *a: heard.append(a[0])))
    assert len(calls) == 2 and heard == [0]  # retries + 1 tries; no wait after the last

    calls.clear()

    async def broken():
        calls.append(1)
        raise ValueError("not something waiting fixes")

    with pytest.raises(ValueError):
        asyncio.run(retry(broken, retries=5, first_delay=0.01, before_wait=lambda *a: None))
    assert len(calls) == 1
    assert JOIN_BACKOFF_S == 2.0
