"""The hivemind reader's fetch budget and strikes (node/transport/hivemind/fetch_budget.py,
strikes.py): pure bookkeeping, by hand."""

from __future__ import annotations

from swarm_node.node.transport.hivemind.fetch_budget import MAX_FETCH_FAILURES, FetchBudget
from swarm_node.node.transport.hivemind.strikes import SourceStrikes, Strikes

E = ("sn1pub", "a" * 64)


def test_rounds_are_read_while_they_want_envelopes_newest_two_more_often():
    b = FetchBudget()
    # want None: every round, every time.
    assert b.due([10, 11], None, known=0, now=0.0, round_seconds=5.0) == [10, 11]
    assert b.due([10, 11], None, known=0, now=0.0, round_seconds=5.0) == [10, 11]
    b = FetchBudget()
    assert b.due([8, 9, 10], 2, known=5, now=100.0, round_seconds=4.0) == [8, 9, 10]
    assert b.due([8, 9, 10], 2, known=5, now=101.0, round_seconds=4.0) == [9, 10]  # every 1 s; round 8 every 4 s
    assert b.due([8, 9, 10], 2, known=5, now=104.0, round_seconds=4.0) == [8, 9, 10]
    # A round with its known fetches and its explore allowance spent (round 10: 1, 10 % 2 == 0) is done.
    for p in ("a", "b"):
        b.spend(10, p, known=True)
    assert b.slots(10, 2, known=5) == (0, 1)
    b.spend(10, "x", known=False)
    assert b.slots(10, 2, known=5) == (0, 0) and b.rounds[10].tried == {"a", "b", "x"}
    assert b.due([8, 9, 10], 2, known=5, now=200.0, round_seconds=4.0) == [8, 9]


def test_a_known_publishers_failed_fetch_gives_its_slot_back_until_it_has_failed_too_often():
    b = FetchBudget()
    b.due([10], 2, known=5, now=0.0, round_seconds=5.0)
    b.spend(10, "sn1pub", known=True)
    for n in range(1, MAX_FETCH_FAILURES):
        assert b.failed(10, E) == n
        assert b.fetch_failed(10, "sn1pub", E, retry=True, known=True) is None  # tried again
        assert b.rounds[10].known == 0 and "sn1pub" not in b.rounds[10].tried
        b.spend(10, "sn1pub", known=True)
    assert b.failed(10, E) == MAX_FETCH_FAILURES
    assert b.fetch_failed(10, "sn1pub", E, retry=True, known=True) is True  # given up, counted
    assert b.is_judged(10, E) and b.rounds[10].known == 1
    assert b.fetch_failed(10, "sn1pub", E, retry=True, known=True) is None  # judged already


def test_an_unknown_key_has_one_try_and_a_pruned_round_is_given_up_uncounted():
    b = FetchBudget()
    b.due([10], 2, known=0, now=0.0, round_seconds=5.0)
    b.spend(10, "sn1pub", known=False)
    b.failed(10, E)
    assert b.fetch_failed(10, "sn1pub", E, retry=False, known=False) is True
    b.failed(11, E)  # a round whose budget was forgotten meanwhile
    assert b.fetch_failed(11, "sn1pub", E, retry=True, known=True) is False
    b.forget_before(11)
    assert set(b.rounds) == set() and set(b.judged) == {11} and set(b.failures) == {(11, *E)}


def test_strikes_double_the_rounds_skipped_and_a_vouch_clears_the_publisher_and_its_hosts():
    s = Strikes()
    s.strike("p", 10)
    assert s.until == {"p": 12} and s.skips("p", 12) and not s.skips("p", 13)
    for _ in range(6):
        s.strike("p", 10)
    assert s.counts == {"p": 7} and s.until == {"p": 10 + 64}  # 2, 4, ... 64, then 64
    s.forget_before(75)
    assert s.until == {} and s.counts == {"p": 7}

    src = SourceStrikes()
    src.served_by[(10, "p")] = "hostA"
    src.strike("p", 10, "hostA")
    assert src.skips("p", "elsewhere", 11) and src.skips("fresh-key", "hostA", 11)
    assert not src.skips("fresh-key", "hostB", 11)
    src.vouch("p")
    assert src.publishers.counts == {} and src.hosts.counts == {}
    assert src.skips("p", "hostA", 11)  # the back-off already running ends in its time


def test_a_host_that_serves_another_publisher_misdirects_other_keys_entries():
    src = SourceStrikes()
    assert not src.misdirected("junk", "hostA")
    src.note_owner("hostA", "honest")
    assert src.misdirected("junk", "hostA") and not src.misdirected("honest", "hostA")
