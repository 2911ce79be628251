"""Where a reader looks for the publishers it knows (node/transport/hivemind/known_shards.py), by hand.

Levels: a reader at 10,000 peers reads level 3; a victim that believes the swarm holds 40 peers
writes at levels 0 and 1 (index.py ``write_levels``)."""

from __future__ import annotations

from node.transport.hivemind.known_shards import MAX_BACKOFF_ROUNDS, KnownShards, Missing, backoff_rounds


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


def test_at_most_two_missing_peers_are_searched_a_round_longest_missing_first():
    k = KnownShards()
    for p in "abcde":
        k.observe({p: [2]}, {}, reader_level=2, round=7)
    assert k.searches(set("abcde"), 7) == ["a", "b"]
    assert k.searches(set("abcde"), 7) == []  # this round's two are spent, whatever reads come next
    assert k.searches(set("cde"), 8, most=1) == ["c"]  # a read wanting one envelope searches one
    assert k.searches(set("cde"), 8) == ["d"]  # and the round's second
    assert k.searches({"e"}, 9) == ["e"]
    assert k.searches({"x"}, 10) == []  # only peers the reader still knows
    k.observe({"f": [2]}, {}, reader_level=2, round=11)
    assert k.searches({"f"}, 11) == ["f"] and k.searches({"f"}, 11) == []  # none twice a round


def test_what_it_remembers_is_bounded():
    k = KnownShards(limit=3)
    for i in range(10):
        k.observe({f"p{i}": [1]}, {f"p{i}": {0}}, reader_level=1)
        k.observe({f"q{i}": [1]}, {}, reader_level=1)
    assert list(k.found_at) == ["p7", "p8", "p9"] and list(k.missing) == ["q7", "q8", "q9"]
