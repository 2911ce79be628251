"""Who a carrier treats as having an admitted history (node/transport/standing.py)."""

import collections

from swarm_node.node.transport.inbox import Inbox
from swarm_node.node.transport.standing import (BEHIND, IDLE_ROUNDS, LAPSE_ROUNDS, MAX_VOUCHED, PROMOTIONS_PER_ROUND,
                                     VOUCH_ROUNDS, Candidate, Standing, counts, promotion_order)


def _inbox() -> Inbox:
    return Inbox(1 << 20, collections.Counter(), collections.Counter())


def _round(inbox: Inbox, r: int) -> None:
    """The receiver polls round ``r`` (and the 4 before): its round is now ``r``."""
    inbox.set_window(list(range(max(0, r - 4), r + 1)), None)


def test_a_publisher_is_vouched_after_admitted_envelopes_in_three_distinct_rounds():
    s = Standing()
    s.admitted("a", 10, 10)
    s.admitted("a", 10, 10)  # the same round again counts once
    s.admitted("a", 11, 11)
    assert "a" not in s and VOUCH_ROUNDS == 3
    s.admitted("a", 12, 12)
    assert "a" not in s  # qualified: vouched as the receiver's next round begins
    s.admitted("b", 13, 13)
    assert "a" in s and s.vouched["a"] == [3, 12]


def test_labels_ahead_of_the_receiver_or_far_behind_it_earn_no_standing():
    assert counts(10, 10) and counts(10 - BEHIND, 10) and BEHIND == 2
    assert not counts(11, 10) and not counts(10 - BEHIND - 1, 10)
    s = Standing()
    s.admitted("a", 11, 10)
    s.admitted("a", 5, 10)
    assert "a" not in s.candidates and s.ignored == 2


def test_three_labels_signed_in_one_receiver_round_count_once():
    """The rule counted envelope labels, and the window admits r-4..r+1: a fresh key published
    labels r-1, r and r+1 in one round and was vouched at once. The receiver's rounds count now."""
    inbox = _inbox()
    _round(inbox, 10)
    for label in (9, 10, 11):
        inbox.vouch("fresh", label)
    _round(inbox, 11)
    inbox.vouch("other", 11)  # the next round begins: what qualified would be promoted now
    assert not inbox.is_vouched("fresh")
    assert inbox.vouched.candidates["fresh"].rounds == {10}
    inbox.vouch("fresh", 11)
    _round(inbox, 12)
    inbox.vouch("fresh", 12)
    _round(inbox, 13)
    inbox.vouch("fresh", 13)
    assert inbox.is_vouched("fresh")  # three receiver rounds (10, 11, 12): vouched as 13 begins


def test_nothing_counts_before_the_receivers_first_poll():
    inbox = _inbox()
    inbox.vouch("early", 5)
    assert not inbox.vouched.candidates


def test_a_flood_whose_bodies_arrive_first_every_round_still_lets_a_newcomer_be_vouched():
    """64 fresh keys a round, each publishing labels r-1, r and r+1 every round (the r+1 bodies
    queued early, so the first admitted as each round begins), took all 32 promotions of every
    round: an honest newcomer joining at round 10 was never vouched (200 rounds run). Promoted the
    longest waiting first, it is vouched after the keys that came before it."""
    inbox = _inbox()
    vouched_at, joined = None, 10
    for r in range(1, 200):
        _round(inbox, r)
        for k in range(64 * r):  # every key of the flood so far, fresh ones included
            for label in (r + 1, r, r - 1):
                inbox.vouch(f"sybil{k}", label)
        if r >= joined:
            inbox.vouch("newcomer", r)
        if vouched_at is None and inbox.is_vouched("newcomer"):
            vouched_at = r
        if r >= 40 and vouched_at is not None:
            break
    assert vouched_at is not None and vouched_at - joined <= 30, vouched_at
    assert inbox.vouched.promoted <= PROMOTIONS_PER_ROUND


def test_promotion_order_is_the_longest_waiting_first_among_those_still_active():
    cands = {"late": Candidate(since=9, last=20, rounds={18, 19, 20}),
             "early": Candidate(since=1, last=20, rounds={15, 17, 20}),
             "lapsed": Candidate(since=0, last=20 - LAPSE_ROUNDS - 1, rounds={9, 10, 11}),
             "short": Candidate(since=2, last=20, rounds={19, 20})}
    assert promotion_order(cands, 21, 5) == ["early", "late"]
    assert promotion_order(cands, 21, 1) == ["early"]


def test_a_candidate_idle_past_the_lapse_starts_over():
    s = Standing()
    s.admitted("a", 1, 1)
    s.admitted("a", 2, 2)
    s.admitted("a", 3 + LAPSE_ROUNDS, 3 + LAPSE_ROUNDS)
    assert s.candidates["a"].rounds == {3 + LAPSE_ROUNDS}


def test_a_flood_of_keys_admitted_once_does_not_evict_a_peer_with_a_long_history():
    """Today's rule vouched a key at its first admitted envelope and forgot the least recently
    vouched of 1,024: a thousand fresh keys admitted once a round pushed every honest peer back
    among the strangers, whose bodies are the first evicted from a full inbox."""
    inbox = _inbox()
    for r in range(10):
        _round(inbox, r)
        inbox.vouch("honest", r)
    for r in range(10, 13):
        _round(inbox, r)
        for k in range(1100):
            inbox.vouch(f"sybil{r}-{k}", r)  # fresh keys, each admitted once
    assert inbox.is_vouched("honest")
    assert not any(inbox.is_vouched(f"sybil12-{k}") for k in range(1100))
    assert inbox.buffer_sizes()["vouched"] == 1


def test_keys_with_three_rounds_each_are_promoted_a_few_a_round_and_displace_only_weaker_standing():
    s = Standing()
    for r in range(20):
        s.admitted("honest", r, r)
    for r in range(20, 24):  # 2,000 keys, each admitted in the same 3 rounds (and the round after)
        for k in range(2000):
            s.admitted(f"x{k}", r, r)
    assert "honest" in s and len(s) == 1 + PROMOTIONS_PER_ROUND
    assert s.deferred == 2000 - PROMOTIONS_PER_ROUND
    # Round after round the cap holds, and the vouched set stays bounded.
    for r in range(24, 24 + MAX_VOUCHED // PROMOTIONS_PER_ROUND + 5):
        for k in range(2000):
            s.admitted(f"x{k}", r, r)
        s.admitted("honest", r, r)
        assert s.promoted <= PROMOTIONS_PER_ROUND and len(s) <= MAX_VOUCHED
    assert len(s) == MAX_VOUCHED and "honest" in s  # 60 rounds of history: never the weakest
    assert s.displaced > 0


def test_an_idle_vouched_publisher_goes_before_an_active_one():
    s = Standing()
    for r in range(50):
        s.admitted("gone", r, r)
    for r in range(200, 204):
        s.admitted("new", r, r)
    s.vouched.update({f"f{k}": [5, 200] for k in range(MAX_VOUCHED - 2)})  # the set is full
    for r in range(201, 205):
        s.admitted("next", r, r)
    assert "next" in s and "new" in s and "gone" not in s  # idle past IDLE_ROUNDS: displaced first
    assert 49 < 200 - IDLE_ROUNDS
    assert "gone" in s.candidates  # back to a candidate: it must earn its rounds again


def test_a_forgotten_publisher_starts_over():
    s = Standing()
    for r in range(5):
        s.admitted("a", r, r)
    assert "a" in s
    s.forget("a")
    assert "a" not in s and "a" not in s.candidates
