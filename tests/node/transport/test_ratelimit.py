"""The token bucket rule (node/transport/ratelimit.py ``Bucket``), with hand-picked times."""

from __future__ import annotations

from swarm_node.node.transport.ratelimit import Bucket, TokenBucket


def test_a_bucket_refills_at_its_rate_up_to_its_burst():
    b = Bucket.full(rate=2.0, burst=3.0, now=10.0)
    assert [b.try_take(1.0, 10.0) for _ in range(4)] == [True, True, True, False]
    assert not b.try_take(1.0, 10.25)  # 0.5 token
    assert b.try_take(1.0, 10.5) and b.tokens == 0.0  # 1 token after 0.5 s at 2/s
    assert b.try_take(1.0, 100.0) and b.tokens == 2.0  # never past the burst
    assert not b.try_take(5.0, 100.0) and b.tokens == 2.0  # too many: nothing taken


def test_time_running_backwards_adds_nothing_and_keeps_the_stamp():
    b = Bucket.full(rate=1.0, burst=1.0, now=5.0)
    assert b.try_take(1.0, 5.0)
    assert not b.try_take(1.0, 3.0) and b.stamp == 5.0
    assert not b.try_take(1.0, 5.5) and b.try_take(1.0, 6.0)


def test_a_request_budget_refuses_without_waiting():
    bucket = TokenBucket(rate=1.0, burst=2.0)
    assert [bucket.try_take() for _ in range(3)] == [True, True, False] and bucket.taken == 2
