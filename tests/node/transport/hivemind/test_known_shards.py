"""Where a reader looks for the publishers it knows (node/transport/hivemind/known_shards.py), by hand.

Levels: a reader at 10,000 peers reads level 3; a victim that believes the swarm holds 40 peers
writes at levels 0 and 1 (index.py ``write_levels``)."""

from __future__ import annotations

from node.transport.hivemind.known_shards import KnownShards


def test_a_peer_never_found_is_looked_for_at_the_readers_level():
    k = KnownShards()
    assert k.levels("v", 3) == [3]
    assert k.plan(["v", "w"], 1) == {"v": [1], "w": [1]}


def test_a_missing_peer_is_looked_for_at_every_other_level_lower_first_then_followed_there():
    k = KnownShards()
    k.observe({"v": [3]}, {}, reader_level=3)  # not in its level-3 shard: the victim writes at 0 and 1
    assert k.levels("v", 3) == [2, 1, 0]
    k.observe({"v": [2, 1, 0]}, {"v": {0, 1}}, reader_level=3)  # found at both: the nearest to 3 is kept
    assert k.found_at["v"] == (1, 3) and not k.missing
    assert k.levels("v", 3) == [1]  # read where it writes from now on...
    assert k.levels("v", 2) == [2]  # ... until the reader's own level changes: its own is tried first
    k.observe({"v": [1]}, {"v": {1, 3}}, reader_level=3)  # found at the reader's level too: forgotten
    assert k.levels("v", 3) == [3] and "v" not in k.found_at


def test_a_peer_found_nowhere_goes_back_to_where_it_was_last_seen():
    k = KnownShards()
    k.observe({"v": [2]}, {"v": {0}}, reader_level=2)  # found at level 0 (a search, or a level-0 read)
    k.observe({"v": [0]}, {}, reader_level=2)  # not published into this round yet, or gone
    assert k.levels("v", 2) == [1, 2, 3]
    k.observe({"v": [1, 2, 3]}, {}, reader_level=2)  # nowhere either: one search, then back to level 0
    assert k.levels("v", 2) == [0] and not k.missing


def test_what_it_remembers_is_bounded():
    k = KnownShards(limit=3)
    for i in range(10):
        k.observe({f"p{i}": [1]}, {f"p{i}": {0}}, reader_level=1)
        k.observe({f"q{i}": [1]}, {}, reader_level=1)
    assert list(k.found_at) == ["p7", "p8", "p9"] and list(k.missing) == ["q7", "q8", "q9"]
