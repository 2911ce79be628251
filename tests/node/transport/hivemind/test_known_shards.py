"""Where a reader looks for the publishers it knows (node/transport/hivemind/known_shards.py), by hand.

Levels: a reader at 10,000 peers reads level 3; a victim that believes the swarm holds 40 peers
writes at levels 0 and 1 (index.py ``write_levels``)."""

from __future__ import annotations

import random
import statistics

from swarm_node.node.transport.hivemind.known_shards import (GONE_RETRY_ROUNDS, MAX_BACKOFF_ROUNDS, MAX_FAILED_SEARCHES, MAX_SEARCHES, KnownShards,
                                                   Missing, backoff_rounds)


def test_a_peer_never_found_is_looked_for_at_the_readers_level():
    k = KnownShards()
    assert k.levels("v", 3) == [3]
    assert k.plan(["v", "w"], 1) == {"v": [1], "w": [1]}


def test_a_missing_peer_is_searched_at_every_level_missed_one_first_then_followed_there():
    k = KnownShards()
    k.observe({"v": [3]}, {}, reader_level=3, round=10)  # not in its level-3 shard: the victim writes at 0 and 1
    assert k.missing["v"] == Missing(3) and k.levels("v", 3) == [3]  # read as before until searched
    assert k.searches({"v", "w"}, 10) == ["v"]
    assert k.levels("v", 3, search=True) == [3, 2, 1, 0]  # where it was missed (a skipped round), then lower
    k.observe({"v": [3, 2, 1, 0]}, {"v": {0, 1}}, reader_level=3, round=10, searched={"v"})
    assert k.found_at["v"] == (1, 3) and not k.missing  # found at both: the nearest to 3 is kept
    assert k.levels("v", 3) == [1]  # read where it writes from now on...
    assert k.levels("v", 2) == [2]  # ... until the reader's own level changes: its own is tried first
    k.observe({"v": [1]}, {"v": {1, 3}}, reader_level=3)  # found at the reader's level too: forgotten
    assert k.levels("v", 3) == [3] and "v" not in k.found_at


def test_a_peer_that_only_skipped_a_round_is_found_at_the_readers_level_and_nothing_is_remembered():
    k = KnownShards()
    k.observe({"v": [2]}, {}, reader_level=2, round=5)  # it did not publish into round 4
    assert k.searches(["v"], 5) == ["v"]
    k.observe({"v": [2, 1, 0, 3]}, {"v": {1, 2}}, reader_level=2, round=5, searched={"v"})  # round 5: back
    assert not k.found_at and not k.missing  # read at level 2, not its 16x fuller level-1 shard


def test_a_search_that_finds_nothing_backs_off_1_2_4_rounds_and_it_is_read_where_last_seen_meanwhile():
    assert [backoff_rounds(f) for f in (0, 1, 2, 3, 5, 9)] == [0, 2, 4, 8, 32, MAX_BACKOFF_ROUNDS]
    k = KnownShards()
    k.observe({"v": [2]}, {"v": {0}}, reader_level=2)  # found at level 0 (a search, or a level-0 read)
    k.observe({"v": [0]}, {}, reader_level=2, round=20)  # gone from there (left, or skipped a round)
    assert k.searches(["v"], 20) == ["v"] and k.levels("v", 2, search=True) == [0, 1, 2, 3]
    k.observe({"v": [0, 1, 2, 3]}, {}, reader_level=2, round=20, searched={"v"})  # nowhere
    assert k.missing["v"] == Missing(0, failed=1, not_before=22)
    assert k.searches(["v"], 21) == [] and k.levels("v", 2) == [0]  # meanwhile: where it was last seen
    k.observe({"v": [0]}, {}, reader_level=2, round=21)  # still not there: no new search for it
    assert k.missing["v"] == Missing(0, failed=1, not_before=22)
    assert k.searches(["v"], 22) == ["v"]
    k.observe({"v": [0, 1, 2, 3]}, {}, reader_level=2, round=22, searched={"v"})
    assert k.missing["v"] == Missing(0, failed=2, not_before=26)
    k.observe({"v": [0]}, {"v": {0}}, reader_level=2, round=23)  # back where it was: found for free
    assert not k.missing and k.found_at["v"] == (0, 2)


def test_at_most_two_missing_peers_are_searched_a_round_chosen_at_random():
    k = KnownShards(rng=random.Random(0))
    for p in "abcde":
        k.observe({p: [2]}, {}, reader_level=2, round=7)
    first = k.searches(set("abcde"), 7)
    assert len(first) == 2 and set(first) <= set("abcde")
    assert k.searches(set("abcde"), 7) == []  # this round's two are spent, whatever reads come next
    rest = set("abcde") - set(first)
    one = k.searches(rest, 8, most=1)  # a read wanting one envelope searches one
    assert len(one) == 1 and len(k.searches(rest, 8)) == 1  # and the round's second
    assert k.searches({"x"}, 10) == []  # only peers the reader still knows
    k.observe({"f": [2]}, {}, reader_level=2, round=11)
    assert k.searches({"f"}, 11) == ["f"] and k.searches({"f"}, 11) == []  # none twice a round
    # At random, not the longest missing first: the last one missing is among a round's first two
    # for some seeds (never, longest first).
    def first_two(seed):
        k = KnownShards(rng=random.Random(seed))
        for p in "abcdef":
            k.observe({p: [2]}, {}, reader_level=2, round=0)
        return k.searches(set("abcdef"), 0)

    assert any("f" in first_two(seed) for seed in range(10))



def _searched_in_vain(k: KnownShards, p: str) -> int:
    """Miss ``p`` at level 2, then search for it MAX_FAILED_SEARCHES times at every level without
    finding it; returns the round of the last search (when it was given up)."""
    k.observe({p: [2]}, {}, reader_level=2, round=0)
    r = 0
    for _ in range(MAX_FAILED_SEARCHES):
        while k.searches({p}, r) != [p]:
            r += 1
        k.observe({p: [2, 1, 0, 3]}, {}, reader_level=2, round=r, searched={p})
    return r


def test_a_peer_searched_for_in_vain_three_times_is_gone_until_it_turns_up_in_a_read():
    k = KnownShards()
    r = _searched_in_vain(k, "v")
    assert "v" not in k.missing and "v" in k.gone and MAX_FAILED_SEARCHES == 3
    k.observe({"v": [2]}, {}, reader_level=2, round=r + 1)  # read at its level, not there: not missing again
    assert k.searches({"v"}, r + GONE_RETRY_ROUNDS - 1) == [] and "v" not in k.missing  # (within the retry wait)
    k.observe({}, {"v": {1}}, reader_level=2, round=r + 101)  # it turns up in a shard read (any level)
    assert "v" not in k.gone
    k.observe({"v": [2]}, {}, reader_level=2, round=r + 102)  # then missing from its shard: searched again
    assert k.searches({"v"}, r + 102) == ["v"]


def _rounds_until_searched(seed: int, silent: int = 64, honest_leaves: int = 20, rounds: int = 300,
                           wanted: int = 8) -> int | None:
    """A reader at level 2 that knows ``silent`` keys gone quiet at round 0 and an honest peer that
    moves to level 0 at round ``honest_leaves`` (where only a search finds it), planned as the
    transport plans a read (node/transport/hivemind/transport.py ``_plan``: the searches, then known
    publishers at random up to ``wanted``): the rounds from its going missing to its first search."""
    rng = random.Random(seed)
    k = KnownShards()
    k.rng = rng  # the transport's generator (seeded here: the outcome is fixed per seed)
    known = [f"silent{i}" for i in range(silent)] + ["honest"]
    missing_since = None
    for r in range(rounds):
        search = k.searches(known, r, most=wanted)
        rest = [p for p in known if p not in search]
        favour = search + rng.sample(rest, wanted - len(search))
        looked = {p: ([2, 1, 0, 3] if p in search else [2]) for p in favour}
        found = {}
        if "honest" in favour and (r < honest_leaves or "honest" in search):
            found["honest"] = {2} if r < honest_leaves else {0}
        if "honest" in search:
            return r - missing_since
        k.observe(looked, found, reader_level=2, round=r, searched=search)
        if missing_since is None and "honest" in k.missing:
            missing_since = r
    return None


def test_sixty_four_silent_keys_do_not_keep_an_honest_missing_peer_from_being_searched():
    """Silent known keys stayed missing for good (back-off up to 32 rounds, the longest missing
    searched first): 64 of them took both searches of every round, and an honest peer that went
    missing was not searched in 300 rounds. Now each silent key costs 3 searches at most, and the
    searches are drawn at random among those due: every seed finds the honest peer searched
    within 3 x 64 / 2 rounds (the bound whatever the draws), most within a few."""
    waits = [_rounds_until_searched(seed) for seed in range(30)]
    assert all(w is not None and w <= MAX_FAILED_SEARCHES * 64 // MAX_SEARCHES for w in waits), waits
    assert statistics.median(waits) <= 30, waits


def test_what_it_remembers_is_bounded():
    k = KnownShards(limit=3)
    for i in range(10):
        k.observe({f"p{i}": [1]}, {f"p{i}": {0}}, reader_level=1)
        k.observe({f"q{i}": [1]}, {}, reader_level=1)
    assert list(k.found_at) == ["p7", "p8", "p9"] and list(k.missing) == ["q7", "q8", "q9"]


def test_a_gone_peer_is_searched_once_more_every_64_rounds_with_a_search_left_over():
    """Sybils near its shard keys can withhold a peer through three searches: it is not given up
    for good, but searched again every GONE_RETRY_ROUNDS rounds, one a round, after the missing."""
    k = KnownShards(rng=random.Random(0))
    r = _searched_in_vain(k, "v")
    assert "v" in k.gone
    gave_up = r
    assert all(k.searches({"v"}, t) == [] for t in range(gave_up + 1, gave_up + GONE_RETRY_ROUNDS))
    # Two missing peers due take both searches: the gone one waits for a round with one left over.
    for p in ("a", "b"):
        k.observe({p: [2]}, {}, reader_level=2, round=gave_up + GONE_RETRY_ROUNDS)
    assert sorted(k.searches({"v", "a", "b"}, gave_up + GONE_RETRY_ROUNDS)) == ["a", "b"]
    assert k.searches({"v"}, gave_up + GONE_RETRY_ROUNDS + 1) == ["v"]
    assert k.levels("v", 2, search=True) == [2, 1, 0, 3]  # every level, the one it was missed at first
    # One more search in vain: gone again, for another GONE_RETRY_ROUNDS.
    k.observe({"v": [2, 1, 0, 3]}, {}, reader_level=2, round=gave_up + GONE_RETRY_ROUNDS + 1, searched={"v"})
    assert "v" in k.gone and "v" not in k.missing
    assert k.searches({"v"}, gave_up + GONE_RETRY_ROUNDS + 2) == []
