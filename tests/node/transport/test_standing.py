"""Who a push carrier's inbox treats as having an admitted history (node/transport/standing.py)."""

import collections

from node.transport.inbox import Inbox
from node.transport.standing import IDLE_ROUNDS, MAX_VOUCHED, PROMOTIONS_PER_ROUND, VOUCH_ROUNDS, Standing


def test_a_publisher_is_vouched_after_admitted_envelopes_in_three_distinct_rounds():
    s = Standing()
    s.admitted("a", 10)
    s.admitted("a", 10)  # the same round again counts once
    s.admitted("a", 11)
    assert "a" not in s and VOUCH_ROUNDS == 3
    s.admitted("a", 12)
    assert "a" in s and s.vouched["a"] == [3, 12]


def test_a_flood_of_keys_admitted_once_does_not_evict_a_peer_with_a_long_history():
    """Today's rule vouched a key at its first admitted envelope and forgot the least recently
    vouched of 1,024: a thousand fresh keys admitted once a round pushed every honest peer back
    among the strangers, whose bodies are the first evicted from a full inbox."""
    inbox = Inbox(1 << 20, collections.Counter(), collections.Counter())
    for r in range(10):
        inbox.vouch("honest", r)
    assert inbox.is_vouched("honest")
    for r in range(10, 13):
        for k in range(1100):
            inbox.vouch(f"sybil{r}-{k}", r)  # fresh keys, each admitted once
    assert inbox.is_vouched("honest")
    assert not any(inbox.is_vouched(f"sybil12-{k}") for k in range(1100))
    assert inbox.buffer_sizes()["vouched"] == 1


def test_keys_with_three_rounds_each_are_promoted_a_few_a_round_and_displace_only_weaker_standing():
    s = Standing()
    for r in range(20):
        s.admitted("honest", r)
    for r in range(20, 23):  # 2,000 keys, each admitted in the same 3 rounds
        for k in range(2000):
            s.admitted(f"x{k}", r)
    assert "honest" in s and len(s) == 1 + PROMOTIONS_PER_ROUND
    assert s.deferred == 2000 - PROMOTIONS_PER_ROUND
    # Round after round the cap holds, and the vouched set stays bounded.
    for r in range(23, 23 + MAX_VOUCHED // PROMOTIONS_PER_ROUND + 5):
        for k in range(2000):
            s.admitted(f"x{k}", r)
        s.admitted("honest", r)
        assert s.promoted <= PROMOTIONS_PER_ROUND and len(s) <= MAX_VOUCHED
    assert len(s) == MAX_VOUCHED and "honest" in s  # 60 rounds of history: never the weakest
    assert s.displaced > 0


def test_an_idle_vouched_publisher_goes_before_an_active_one():
    s = Standing()
    for r in range(50):
        s.admitted("gone", r)
    for r in range(200, 203):
        s.admitted("new", r)
    s.vouched.update({f"f{k}": [5, 200] for k in range(MAX_VOUCHED - 2)})  # the set is full
    for r in range(201, 204):
        s.admitted("next", r)
    assert "next" in s and "new" in s and "gone" not in s  # idle past IDLE_ROUNDS: displaced first
    assert 49 < 200 - IDLE_ROUNDS
    assert "gone" in s.candidates  # back to a candidate: its next admitted round vouches it again
