"""A Sybil flood of one peer's own shard, over the real hivemind DHT with ground keys
(scripts/attack_suite/shard_flood.py runs it): the victim and the receiver keep finding each other.

160 keys ground into the victim's two-hex-digit shard store one owner-signed entry each at levels
0-2 every round (480 signatures a round, all kept). A receiver that counted the shard of the peer
it follows would believe in a swarm of thousands, read levels the victim never writes, and the
two would lose each other in both directions (before the fix: 20-44% of the control's delivery)."""

from __future__ import annotations

import asyncio

import pytest

from attack_suite.shard_flood import Phase, run_shard_flood

pytestmark = [pytest.mark.daemon, pytest.mark.slow]


def test_a_flood_of_the_victims_own_shard_leaves_delivery_both_ways_within_90pct_of_clean():
    lines = []
    res = asyncio.run(run_shard_flood([Phase("clean", 6, False), Phase("flood", 10, True)], n_keys=160,
                                      round_seconds=3.0, say=lines.append))
    clean, flood = res["phases"]["clean"], res["phases"]["flood"]
    report = f"{lines} {res}"
    assert res["sybil_entries"].get("kept", 0) > 0, report  # the flood was written: the validator keeps ground keys
    for direction in ("victim_to_receiver", "receiver_to_victim"):
        assert clean[direction] >= 0.8, report  # the control itself delivered
        assert flood[direction] >= 0.9 * clean[direction], report
    # Neither was fooled into a swarm of thousands (level 2 starts above 512 peers).
    assert flood["receiver_estimate"][1] <= 512 and flood["victim_estimate"][1] <= 512, report
