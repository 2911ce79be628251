"""The gossip validator's budget (node/transport/libp2p/budget.py), with hand-picked times."""

from swarm_node.node.transport.libp2p.budget import AHEAD, MAX_ROUNDS, CheckBudget


def test_strangers_share_a_rate_and_a_burst_and_vouched_publishers_do_not_spend_it():
    b = CheckBudget(strangers_per_s=2.0, strangers_burst=3.0)
    # A burst of 3 strangers' bodies at t=0, then nothing until tokens come back at 2 a second.
    assert [b.body(f"s{i}", 10, False, 0.0) for i in range(5)] == [None, None, None,
                                                                 "strangers_over_budget", "strangers_over_budget"]
    assert b.body("friend", 10, True, 0.0) is None  # vouched: checked with the bucket empty
    assert b.body("s5", 10, False, 0.25) == "strangers_over_budget"  # 0.5 token
    assert b.body("s5", 10, False, 0.5) is None  # 1 token after 0.5 s at 2/s
    assert b.body("s6", 10, False, 10.0) is None  # refilled, but never past the burst:
    assert [b.body(f"t{i}", 10, False, 10.0) for i in range(3)] == [None, None, "strangers_over_budget"]


def test_two_bodies_a_round_per_publisher_and_rounds_bounded_around_the_newest_polled():
    b = CheckBudget()
    assert [b.body("friend", 10, True, 0.0) for _ in range(3)] == [None, None, "republished"]
    assert b.body("friend", 11, True, 0.0) is None  # another round, another two
    assert b.body("friend", 10 + AHEAD, True, 0.0, newest=10) is None
    assert b.body("friend", 11 + AHEAD, True, 0.0, newest=10) == "wrong_round"  # would push the rounds out
    # Only the newest MAX_ROUNDS rounds are counted: an older one has nothing to be counted by.
    for r in range(100, 100 + MAX_ROUNDS):
        assert b.body("friend", r, True, 0.0) is None
    assert b.body("friend", 50, True, 0.0) == "outside_window"
    assert len(b._rounds) == MAX_ROUNDS


def test_heartbeats_one_per_gap_per_publisher_and_strangers_pay_for_theirs():
    b = CheckBudget(strangers_per_s=1.0, strangers_burst=1.0, heartbeat_gap_s=0.5)
    assert b.heartbeat("friend", True, 0.0) is None
    assert b.heartbeat("friend", True, 0.3) == "heartbeat_rate"
    assert b.heartbeat("friend", True, 0.6) is None
    assert b.heartbeat("s1", False, 0.0) is None
    assert b.heartbeat("s2", False, 0.1) == "strangers_over_budget"
    assert b.body("s3", 1, False, 0.2) == "strangers_over_budget"  # one bucket for bodies and heartbeats
    assert b.heartbeat("s2", False, 1.0) is None


def test_far_future_rounds_counted_before_a_clock_was_known_do_not_lock_the_table():
    b = CheckBudget()
    for r in range(1 << 40, (1 << 40) + MAX_ROUNDS):  # no clock yet: nothing to bound them by
        assert b.body("x", r, True, 0.0) is None
    assert b.body("friend", 10, True, 0.0) == "outside_window"  # the table is full of them
    assert b.body("friend", 10, True, 0.0, newest=10) is None  # a clock: they go, round 10 is counted
    assert set(b._rounds) == {10}


def test_a_replayed_old_heartbeat_does_not_take_its_publishers_gap_from_the_real_one():
    """An old signed heartbeat replayed past pubsub's seen cache used to stamp its publisher's
    0.5 s gap, so the publisher's real heartbeat right after it was refused (heartbeat_rate)."""
    b = CheckBudget()
    assert b.heartbeat("friend", True, 0.0, stamp=500.0) is None
    b.heartbeat_checked("friend", 500.0, True)
    # The replay: older than the newest accepted, dropped before any check and charged nothing.
    assert b.heartbeat("friend", True, 1.0, stamp=100.0) == "heartbeat_replay"
    assert b.heartbeat("friend", True, 1.1, stamp=510.0) is None  # the real one, 0.1 s later
    b.heartbeat_checked("friend", 510.0, True)
    assert b.heartbeat("friend", True, 1.2, stamp=520.0) == "heartbeat_rate"  # the gap still holds


def test_a_heartbeat_the_full_check_refuses_gives_its_gap_back():
    """Before any heartbeat of it was accepted, a replay is checked (and refused as a replay or
    stale): its charge is given back, and the real heartbeat that follows is checked."""
    b = CheckBudget()
    assert b.heartbeat("friend", True, 0.0, stamp=100.0) is None
    b.heartbeat_checked("friend", 100.0, False)
    assert b.heartbeat("friend", True, 0.1, stamp=500.0) is None
    b.heartbeat_checked("friend", 500.0, True)
    assert b.heartbeat("friend", True, 0.2, stamp=501.0) == "heartbeat_rate"  # an accepted one keeps it
    assert b.heartbeat("friend", True, 0.7, stamp=501.0) is None


def test_serves_of_one_body_twice_a_peer_and_sixteen_in_all_to_strangers():
    from swarm_node.node.transport.libp2p.serving import MAX_SERVES, MAX_STRANGER_SERVES, Serves

    s, size = Serves(), 1000

    def served(remote, round=1, vouched=False, written=size):
        settle = s.take(remote, round, vouched, size)
        if settle is not None:
            settle(written)
        return settle is not None

    assert [served("p") for _ in range(3)] == [True] * MAX_SERVES + [False]
    assert sum(served(f"fresh{k}") for k in range(100)) == MAX_STRANGER_SERVES - MAX_SERVES
    assert served("friend", vouched=True) and served("friend", vouched=True) and not served("friend", vouched=True)
    assert served("fresh0", round=2)  # another body: its own count
    s.keep_only({2})
    assert set(s.charged) == {2} and all(r == 2 for _, r in s.by_peer)


def test_a_strangers_serve_is_charged_what_was_written_and_in_flight_ones_are_reserved():
    """Serves were charged before the write and never given back: 8 fresh ids whose streams reset
    at once used up the 16 serves of a body nobody received."""
    from swarm_node.node.transport.libp2p.serving import MAX_STRANGER_INFLIGHT, MAX_STRANGER_SERVES, Serves, stranger_may_start

    s, size = Serves(), 1000
    for k in range(8):  # 8 fresh ids, 2 serves each, each reset after 10 bytes
        for _ in range(2):
            s.take(f"reset{k}", 1, False, size)(10)
    assert s.charged[1] == 160 and s.reserved[1] == 0
    honest = s.take("honest", 1, False, size)
    assert honest is not None  # the honest stranger is still served
    honest(size)
    # In flight, a serve holds the whole body: at most MAX_STRANGER_INFLIGHT at once, and no more
    # in all than the byte cap allows.
    started, total, batch = [None], 0, 0
    while started:
        started = [f for f in (s.take(f"f{batch}-{k}", 1, False, size) for k in range(40)) if f is not None]
        assert len(started) <= MAX_STRANGER_INFLIGHT and s.reserved[1] == len(started) * size
        total, batch = total + len(started), batch + 1
        for settle in started:
            settle(size)
            settle(size)  # settled once only
    assert total == MAX_STRANGER_SERVES - 2  # (the honest one's and the resets' 160 bytes)
    assert s.charged[1] == 160 + size + total * size and s.reserved[1] == 0
    assert not stranger_may_start(s.charged[1], 0, size) and stranger_may_start(0, 15 * size, size)
