"""The swarm-size estimate (node/transport/hivemind/size_estimate.py), computed by hand.

A level-l shard stands for 16**l of its kind; a level that found fewer than 3 entries in all is
noise unless nothing better was read (index.py ``estimate_size``). Levels: up to 32 peers 0, up
to 512 1, up to 8192 2."""

from __future__ import annotations

from swarm_node.node.transport.hivemind.size_estimate import next_estimate


def test_nothing_read_leaves_the_estimate():
    assert next_estimate(100.0, []) == 100.0


def test_up_at_once_but_at_most_four_fold():
    assert next_estimate(1.0, [(5, 0, 10)]) == 4.0  # 10 peers in the one level-0 shard: 1 -> min(10, 4)
    assert next_estimate(10.0, [(5, 0, 30)]) == 30.0  # 30 < 4 x 10
    assert next_estimate(10.0, [(5, 1, 10)]) == 40.0  # 10 x 16 = 160, capped at 40


def test_down_halfway_and_never_below_one():
    assert next_estimate(100.0, [(5, 1, 3), (5, 1, 5)]) == 82.0  # mean 4 x 16 = 64; (100 + 64) / 2
    assert next_estimate(10.0, [(5, 0, 0)]) == 5.5  # an empty read counts as 1 peer: (10 + 1) / 2
    assert next_estimate(1.0, [(5, 0, 0)]) == 1.0


def test_the_largest_solid_level_wins():
    # Level 1 found 2 + 2 = 4 entries (solid): 2 x 16 = 32; level 2 found 1 (noise): 256 ignored.
    assert next_estimate(32.0, [(5, 1, 2), (5, 1, 2), (5, 2, 1)]) == 32.0
    # Level 2 solid too (3 entries): 3 x 256 = 768 beats 32; up at once (within 4 x 200).
    assert next_estimate(200.0, [(5, 1, 2), (5, 1, 2), (5, 2, 3)]) == 768.0


def test_the_newest_round_counts_only_its_probes_of_higher_levels_and_only_upwards():
    # At 100 (level 1) the newest round's level-1 shard is not counted (most have not published
    # into it yet); its level-2 probe, 1 x 256, raises the estimate.
    assert next_estimate(100.0, [(7, 1, 20), (7, 2, 1)], newest=7) == 256.0
    assert next_estimate(100.0, [(7, 1, 20)], newest=7) == 100.0  # its own level: not counted
    assert next_estimate(1000.0, [(7, 3, 0)], newest=7) == 1000.0  # a probe finding nothing cannot lower it
    # Older rounds fold as usual; the probe wins only above them: (100 + 64) / 2 without it.
    assert next_estimate(100.0, [(6, 1, 4), (7, 2, 1)], newest=7) == 256.0
    assert next_estimate(100.0, [(6, 1, 4), (7, 2, 0)], newest=7) == 82.0
