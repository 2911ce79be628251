"""The clock offset from peers' signed timestamps (node/swarm/clock_offset.py), and the running
node's one warning when it is too big (the heartbeat hook in node/swarm/exchange.py)."""

from __future__ import annotations

import asyncio
import logging
import time

import pytest

from node.swarm.clock_offset import ClockWatch, median_offset, peer_offsets, skew_exceeds, skew_message
from node.transport.memory import MemoryHub
from protocol.codec import encode
from protocol.identity import Identity
from protocol.messages import Announcement
from tests.helpers.exchange import TOK_FP, clock_at, envelope, make_exchange


def test_the_offset_is_the_median_of_peers_signed_minus_seen_times():
    # Peers' clocks minus ours: +0.2, -0.1, +0.4, and one peer 50 s off, which the median ignores.
    stamps = [(1000.2, 1000.0), (2000.0, 2000.1), (3000.4, 3000.0), (4050.0, 4000.0)]
    assert median_offset(stamps) == pytest.approx(0.3)  # the middle two: (0.2 + 0.4) / 2
    assert median_offset(stamps[:3]) == pytest.approx(0.2)
    assert median_offset([]) is None


def test_each_peer_counts_once_with_the_median_of_its_own_samples():
    stamps = [("a", 10.0, 9.0), ("a", 20.0, 19.0), ("a", 30.0, 39.0),  # a: +1, +1, -9 -> +1
              ("b", 5.0, 5.5)]  # b: -0.5
    assert peer_offsets(stamps) == {"a": 1.0, "b": -0.5}


def test_the_bound_is_a_quarter_round_plus_what_sampling_cannot_tell():
    assert not skew_exceeds(1.25, 5.0) and skew_exceeds(1.26, 5.0) and skew_exceeds(-1.26, 5.0)
    assert not skew_exceeds(1.7, 5.0, uncertainty=0.5) and skew_exceeds(1.8, 5.0, uncertainty=0.5)
    assert "2.00 s behind" in skew_message(2.0, 3, 5.0) and "0.40 of a round" in skew_message(2.0, 3, 5.0)
    assert "ahead of" in skew_message(-2.0, 3, 5.0) and "NTP" in skew_message(-2.0, 3, 5.0)


def test_a_watch_warns_once_and_only_from_peers_heard_twice():
    w = ClockWatch(5.0)
    assert w.heard("a", 103.0, 100.0) is None  # one sample: not yet a clock
    assert w.offset() is None
    first = w.heard("a", 113.0, 110.0)
    assert first is not None and "3.00 s behind" in first and w.offset() == 3.0
    assert w.heard("a", 123.0, 120.0) is None  # once
    assert w.warned


def test_a_watch_times_a_heartbeat_at_the_middle_of_the_poll_interval():
    w = ClockWatch(5.0)
    w.polled(100.0)
    assert w.heard_now("a", 100.0) is None and w.peer_offsets() == {}  # the first poll: any age
    w.polled(102.0)
    w.heard_now("a", 101.0)
    w.heard_now("a", 101.2)
    assert w.peer_offsets() == {"a": pytest.approx(0.1)}  # seen at 101.0, the middle of 100..102


def test_a_watch_keeps_a_bounded_number_of_peers():
    w = ClockWatch(5.0, max_peers=3)
    for i in range(10):
        w.heard(f"p{i}", 1.0, 1.0)
    assert len(w._offsets) == 3


def _rounds_of_heartbeats(w: ClockWatch, polls: range, senders: dict[str, float], t0: float = 1000.0) -> None:
    # One heartbeat per sender per poll (half a 5 s round apart), its stamp ``skew`` off this clock.
    for k in polls:
        seen = t0 + 2.5 * k
        w.polled(seen)
        for sender, skew in senders.items():
            w.heard(sender, seen + skew, seen)


def test_a_flood_of_fresh_keys_with_false_stamps_cannot_move_the_median_or_push_out_honest_peers():
    w = ClockWatch(5.0)  # 256 peers, as a running node's
    honest = {f"honest{i}": 0.05 * i for i in range(3)}
    _rounds_of_heartbeats(w, range(4), honest)
    assert w.offset() == pytest.approx(0.05)
    # 600 fresh keys, each 8 s ahead of this clock (a whole round and a half), heard in every poll.
    flood = {f"sybil{i}": 8.0 for i in range(600)}
    _rounds_of_heartbeats(w, range(4, 60), {**honest, **flood})
    assert len(w._offsets) <= 256 and set(honest) <= set(w._offsets)  # the long-heard peers stayed
    assert w.offset() == pytest.approx(0.05) and not w.warned  # the flood is tracked, not counted
    assert w.untracked > 0


def test_peers_with_standing_outvote_keys_that_came_first():
    trained_on: set[str] = set()
    w = ClockWatch(5.0, standing=trained_on.__contains__)
    flood = {f"sybil{i}": 8.0 for i in range(40)}  # there before the honest peers, so met on joining
    _rounds_of_heartbeats(w, range(3), flood)
    honest = {"a": 0.1, "b": 0.2}
    _rounds_of_heartbeats(w, range(3, 6), {**flood, **honest})
    assert w.offset() == pytest.approx(8.0)  # no history yet: the keys met first count
    trained_on.update(honest)  # the exchange trained on their rollouts
    assert w.offset() == pytest.approx(0.15)
    assert list(w.counted()) == ["a", "b"]


def test_a_peer_with_standing_finds_room_in_a_full_table():
    w = ClockWatch(5.0, max_peers=4, standing={"vouched"}.__contains__)
    _rounds_of_heartbeats(w, range(2), {f"k{i}": 1.0 for i in range(4)})
    _rounds_of_heartbeats(w, range(2, 4), {"vouched": 0.0})
    assert "vouched" in w._offsets and w.offset() == 0.0 and len(w._offsets) == 4
    assert "k3" not in w._offsets  # the newest without standing made room


def _heartbeat(ident: Identity, seq: int, skew: float) -> bytes:
    now = time.time() + skew
    msg = Announcement(sender=ident.peer_id, round=5, policy_version=0, model_fingerprint="m",
                       tokenizer_fingerprint=TOK_FP, created_at=now, addrs=())
    return envelope(ident, encode(msg), seq=seq, now=now)


@pytest.mark.parametrize("skew, warned", [(8.0, True), (0.3, False)])
def test_a_node_warns_once_when_its_peers_clocks_are_a_good_part_of_a_round_off(skew, warned, caplog):
    hub, me, peer = MemoryHub(), Identity.generate(), Identity.generate()

    async def go():
        ex = make_exchange(hub, me, clock_at(5, round_seconds=10.0))
        t = time.time()
        ex.clock_watch.polled(t - 0.05)
        ex.clock_watch.polled(t + 0.05)
        for seq in range(1, 5):
            hub.put("s", "peers", peer.peer_id, _heartbeat(peer, seq, skew), time.time() + 60)
            for d in await ex.transport.poll_announcements():
                assert ex.admit_announcement(d)
        return ex

    with caplog.at_level(logging.WARNING, logger="node.swarm.exchange"):
        ex = asyncio.run(go())
    warnings = [r.getMessage() for r in caplog.records if "clock" in r.getMessage()]
    assert len(warnings) == (1 if warned else 0), warnings
    assert ex.status()["clock_offset_s"] == pytest.approx(skew, abs=0.3)
    if warned:
        assert "behind the median of 1 peer(s)" in warnings[0]
