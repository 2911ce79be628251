"""The clock offset from peers' signed timestamps (node/swarm/clock_offset.py), and the running
node's one warning when it is too big (the heartbeat hook in node/swarm/exchange.py)."""

from __future__ import annotations

import asyncio
import logging
import time

import pytest

from swarm_node.node.swarm.clock_offset import ClockWatch, median_offset, peer_offsets, skew_exceeds, skew_message, warn_again
from swarm_node.node.swarm.pool import AdmittedGroup
from swarm_node.node.transport.memory import MemoryHub
from swarm_node.protocol.codec import encode
from swarm_node.protocol.identity import Identity
from swarm_node.protocol.messages import Announcement
from swarm_node.rewards.registry import make_task
from tests.helpers.exchange import TOK_FP, clock_at, envelope, make_exchange, record


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
    honest = {"a": 0.1, "b": 0.2, "c": 0.3}
    _rounds_of_heartbeats(w, range(3, 6), {**flood, **honest})
    assert w.offset() == pytest.approx(8.0)  # no history yet: the keys met first count
    trained_on.update(("a", "b"))  # the exchange trained on their rollouts ...
    assert w.offset() == pytest.approx(8.0)  # ... but two keys are not the swarm's clock
    trained_on.add("c")
    assert w.offset() == pytest.approx(0.2)
    assert list(w.counted()) == ["a", "b", "c"]


def test_two_keys_with_standing_and_false_stamps_do_not_make_the_median():
    """The reviewer's case: before, any peer with standing made the median count only those, so 2
    keys with standing, 6 s ahead, among 6 honest peers met first, gave a false "6 s behind"."""
    standing = {"s1", "s2"}
    w = ClockWatch(10.0, uncertainty=3.0, standing=standing.__contains__)
    honest = {f"h{i}": 0.0 for i in range(6)}
    _rounds_of_heartbeats(w, range(6), honest)
    said = _heard_rounds(w, range(6, 9), {**honest, "s1": 6.0, "s2": 6.0})
    assert w.offset() == 0.0 and said == [] and not w.warned
    assert set(w.counted()) == set(honest)


def _heard_rounds(w: ClockWatch, polls: range, senders: dict[str, float], t0: float = 1000.0) -> list[str]:
    """``_rounds_of_heartbeats``, returning the warnings said."""
    said = []
    for k in polls:
        seen = t0 + 2.5 * k
        w.polled(seen)
        said += [m for sender, skew in senders.items() if (m := w.heard(sender, seen + skew, seen))]
    return said


def test_a_warning_is_said_again_once_the_offset_was_back_in_line_or_moved_a_whole_bound():
    """Before, ``warned`` latched: after one warning (a false alarm, say) a real skew later was
    never reported."""
    w = ClockWatch(5.0)  # bound 1.25 s
    peers = [f"p{i}" for i in range(3)]
    assert len(_heard_rounds(w, range(0, 8), dict.fromkeys(peers, 3.0))) == 1  # said once while it holds
    assert _heard_rounds(w, range(8, 16), dict.fromkeys(peers, 0.0)) == [] and not w.warned  # back in line
    again = _heard_rounds(w, range(16, 24), dict.fromkeys(peers, -3.0))
    assert len(again) == 1 and "3.00 s ahead of" in again[0]
    moved = _heard_rounds(w, range(24, 32), dict.fromkeys(peers, -6.0))  # worse by more than the bound
    assert len(moved) == 1 and "6.00 s ahead of" in moved[0]


@pytest.mark.parametrize("offset, warned_at, out", [
    (1.0, None, (False, None)), (2.0, None, (False, None)), (2.5, None, (True, 2.5)),  # within the bound / past it
    (3.0, 2.5, (False, 2.5)), (1.1, 2.5, (False, 2.5)),  # what was said still holds
    (0.9, 2.5, (False, None)),  # back within half the bound: re-armed
    (4.6, 2.5, (True, 4.6)), (-2.5, 2.5, (True, -2.5)),  # moved by more than the bound
])
def test_when_a_warning_is_said_again(offset, warned_at, out):
    assert warn_again(offset, warned_at, 2.0) == out


def test_standing_in_a_running_node_is_two_rounds_of_work_not_one_group_taken():
    hub, me, peer = MemoryHub(), Identity.generate(), Identity.generate()
    ex = make_exchange(hub, me, clock_at(5))
    for r in (5, 6):
        assert not ex.clock_watch.standing(peer.peer_id)  # before: one group taken once was standing
        recs = (record(), record(ids=(4, 5)))
        ex.pool.add(AdmittedGroup(sender=peer.peer_id, round=r, policy_version=1, model_fingerprint="m",
                                  tokenizer_fingerprint=TOK_FP, task_id=recs[0].task_id, records=recs,
                                  task=make_task(recs[0].task_id), token_level=True, rewards=(0.0, 1.0)))
        assert len(ex.take(1, r)) == 1
    assert ex.clock_watch.standing(peer.peer_id)


def test_a_peer_with_standing_finds_room_in_a_full_table():
    w = ClockWatch(5.0, max_peers=4, standing={"vouched"}.__contains__)
    _rounds_of_heartbeats(w, range(2), {f"k{i}": 1.0 for i in range(4)})
    _rounds_of_heartbeats(w, range(2, 4), {"vouched": 0.0})
    assert "vouched" in w._offsets and len(w._offsets) == 4
    assert w.offset() == 1.0  # (one peer with standing is not counted alone: MIN_PEERS)
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

    with caplog.at_level(logging.WARNING, logger="swarm_node.node.swarm.exchange"):
        ex = asyncio.run(go())
    warnings = [r.getMessage() for r in caplog.records if "clock" in r.getMessage()]
    assert len(warnings) == (1 if warned else 0), warnings
    assert ex.status()["clock_offset_s"] == pytest.approx(skew, abs=0.3)
    if warned:
        assert "behind the median of 1 peer(s)" in warnings[0]
