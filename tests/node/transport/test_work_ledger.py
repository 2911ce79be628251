"""The one ledger of sustained work (node/transport/work_ledger.py), by hand: distinct rounds,
the weakest entry displaced, lapses, and the three rules side by side."""

from __future__ import annotations

from swarm_node.node.transport.work_ledger import FOLLOWERS, PEER_WORK, VOUCHING, WorkLedger, WorkRule, weakness


def test_a_round_counts_once_and_only_when_newer():
    led = WorkLedger(WorkRule(rounds=2, limit=10, idle=5))
    led.record("a", 3)
    led.record("a", 3)  # the same round: one round of work
    led.record("a", 2)  # an older one: nothing
    assert led["a"] == [1, 3] and not led.proven("a")
    led.record("a", 4)
    assert led["a"] == [2, 4] and led.proven("a") and led.proven("a", now=8) and not led.proven("a", now=9)


def test_past_the_limit_the_weakest_other_goes_idle_first_then_fewest_rounds():
    led = WorkLedger(WorkRule(rounds=2, limit=3, idle=10))
    for r in range(11, 16):
        led.record("long", r)  # 5 rounds, last 15
    led.record("idle", 1)
    led.record("idle", 2)  # 2 rounds, last 2
    led.record("one", 20)  # 1 round, last 20: now "idle" is idle (2 < 20 - 10)
    assert led.record("new", 21) == ("idle", [2, 2])  # the idle one first, though it has 2 rounds
    assert led.record("newer", 22) == ("one", [1, 20])  # then the fewest rounds (ties: least recent)
    assert set(led) == {"long", "new", "newer"}  # a newcomer always gets an entry


def test_a_full_vouched_set_may_send_the_newcomer_back():
    led = WorkLedger(WorkRule(rounds=3, limit=2, idle=100))
    led.add("a", [9, 50], now=50)
    led.add("b", [8, 50], now=50)
    assert led.add("c", [3, 50], now=50, keep_new=False) == ("c", [3, 50])  # longer histories stay
    assert led.add("c", [3, 50], now=50) == ("b", [8, 50])  # keep_new: the weakest other goes


def test_windowed_work_is_that_many_rounds_inside_one_window():
    """A learner's followers (roles.py): 3 steps within 100 of each other, as the sliding window
    it kept before; one step every 99 or 100 keeps nobody vouched."""
    def proven_after(steps, now):
        led = WorkLedger(WorkRule(rounds=3, limit=10, idle=100))
        for s in steps:
            led.record("w", s, window=True)
        return led.proven("w", now=now)

    assert proven_after([1, 2, 3], 3) and proven_after([1, 50, 100], 100)
    assert not proven_after([1, 100, 199], 199) and not proven_after([1, 101, 201], 201)
    assert not proven_after([1, 2, 3, 103, 203, 303, 403], 403)
    assert not proven_after([1, 2, 3], 103)  # the last of them 100 steps ago: no longer recent
    led = WorkLedger(WorkRule(rounds=3, limit=1, idle=100))
    led.record("w", 1, window=True)
    led.record("x", 2, window=True)  # displaces w, and its window with it
    assert "w" not in led and "w" not in led._recent


def test_the_weakness_order_and_the_three_rules():
    assert sorted([[5, 1], [1, 90], [2, 90]], key=lambda e: weakness(e, idle_before=50)) == [[5, 1], [1, 90], [2, 90]]
    assert (VOUCHING.rounds, VOUCHING.limit, VOUCHING.idle) == (3, 1024, 100)
    assert (PEER_WORK.rounds, PEER_WORK.limit, PEER_WORK.idle) == (2, 4096, 1000)
    assert (FOLLOWERS.rounds, FOLLOWERS.limit, FOLLOWERS.idle) == (3, 512, 100)
