"""node/observe/paired.py by hand: reading curves at equal steps, own generation and wall-clock,
the paired difference over seeds, and the percentile bootstrap intervals (one that must exclude 0,
one that must include it)."""

from __future__ import annotations

import pytest

from swarm_node.node.observe.paired import (Point, bootstrap_mean, curve_points, paired_comparison,
                                            paired_difference, seed_difference, unpaired_difference, value_at)


def _curve(rows) -> list[Point]:
    return [Point(*r) for r in rows]


# A 4/4 node (4 own groups a step, slow: 2 s a step) against an 8/0 node (8 own groups, 1 s a step),
# evaluated every 10 steps: (step, own groups, seconds, score).
SHARING = _curve([(0, 0, 0, 0.20), (10, 40, 20, 0.30), (20, 80, 40, 0.35), (30, 120, 60, 0.40), (40, 160, 80, 0.50)])
SOLO = _curve([(0, 0, 0, 0.20), (10, 80, 10, 0.28), (20, 160, 20, 0.44), (30, 240, 30, 0.46), (40, 320, 40, 0.48)])


def test_a_curve_is_read_between_its_evaluations_and_not_beyond_them():
    c = _curve([(0, 0, 0, 0.2), (5, 40, 10, 0.3), (10, 80, 20, 0.5)])
    assert value_at(c, "own_groups", 60) == pytest.approx(0.4)  # halfway from 0.3 to 0.5
    assert value_at(c, "own_groups", 40) == pytest.approx(0.3) and value_at(c, "step", 0) == pytest.approx(0.2)
    assert value_at(c, "seconds", 15) == pytest.approx(0.4)
    assert value_at(c, "own_groups", 100) is None and value_at(c, "own_groups", -1) is None
    assert value_at(c[:1], "step", 0) == 0.2 and value_at(c[:1], "step", 1) is None


def test_one_seeds_difference_at_equal_steps_own_generation_and_wall_clock_by_hand():
    # Equal steps: the end scores, steps 20, 30, 40: (0.35 + 0.40 + 0.50) / 3 - (0.44 + 0.46 + 0.48) / 3.
    assert seed_difference(SHARING, SOLO, "step") == pytest.approx(1.25 / 3 - 0.46)
    # Equal own generation: the 4/4 node got less far (160 groups), so its last three places, 80,
    # 120 and 160 groups, where the 8/0 node had 0.28, 0.36 (halfway from 0.28 to 0.44) and 0.44.
    assert seed_difference(SHARING, SOLO, "own_groups") == pytest.approx(1.25 / 3 - (0.28 + 0.36 + 0.44) / 3)
    # Equal wall-clock: the 8/0 node got less far (40 s): at 20, 30 and 40 s the 4/4 node had 0.30,
    # 0.325 and 0.35.
    assert seed_difference(SHARING, SOLO, "seconds") == pytest.approx((0.30 + 0.325 + 0.35) / 3 - 0.46)
    assert seed_difference(SOLO, SHARING, "seconds") == pytest.approx(0.46 - (0.30 + 0.325 + 0.35) / 3)  # A - B
    with pytest.raises(ValueError, match="axis"):
        seed_difference(SHARING, SOLO, "tokens")


def test_the_evaluation_before_training_counts_only_when_there_is_no_other():
    start_only = _curve([(0, 0, 0, 0.2)])
    assert seed_difference(start_only, _curve([(0, 0, 0, 0.1), (10, 40, 5, 0.4)]), "step") == pytest.approx(0.1)
    late = _curve([(20, 80, 40, 0.3), (30, 120, 60, 0.3)])  # no evaluation where the other's are
    assert seed_difference(_curve([(5, 20, 10, 0.1), (10, 40, 20, 0.2)]), late, "step") is None


def test_an_interval_that_must_exclude_zero():
    # Seeds' differences 0.1, 0.2, 0.3: a resample's mean is 0.1 only when all three draws are 0.1,
    # 1 in 27 (3.7%, more than the 2.5% tail), so the 2.5th percentile is 0.1 and, likewise, the
    # 97.5th 0.3.
    ci = bootstrap_mean([0.1, 0.2, 0.3])
    assert ci.diff == pytest.approx(0.2) and ci.low == pytest.approx(0.1) and ci.high == pytest.approx(0.3)
    assert ci.excludes_zero() and ci.n == 3 and ci.level == 0.95
    assert bootstrap_mean([0.1, 0.2, 0.3]) == ci  # a seeded generator: the same interval every time


def test_an_interval_that_must_include_zero():
    # -0.1 and 0.1: resample means -0.1, 0 and 0.1 with chances 1/4, 1/2, 1/4.
    ci = bootstrap_mean([-0.1, 0.1])
    assert ci.diff == pytest.approx(0.0) and ci.low == pytest.approx(-0.1) and ci.high == pytest.approx(0.1)
    assert not ci.excludes_zero()
    one = bootstrap_mean([0.3])  # one seed: a mean, no interval
    assert one.diff == 0.3 and one.low is None and one.high is None and not one.excludes_zero()
    with pytest.raises(ValueError):
        bootstrap_mean([])


def test_the_paired_difference_over_seeds():
    """Three seeds where arm A is arm B lifted by 0.1, 0.2 and 0.3 everywhere: the differences at
    every axis are those, so the interval is [0.1, 0.3] (as above)."""
    base = [_curve([(0, 0, 0, 0.1), (10, 40, 10, 0.2), (20, 80, 20, 0.3), (30, 120, 30, 0.3)])] * 3
    lifted = [[Point(p.step, p.own_groups, p.seconds, p.score + d) for p in c] for c, d in zip(base, (0.1, 0.2, 0.3))]
    out = paired_comparison(lifted, base)
    assert set(out) == {"step", "own_groups", "seconds"}
    for ci in out.values():
        assert (ci.diff, ci.low, ci.high, ci.n) == pytest.approx((0.2, 0.1, 0.3, 3))
    # A seed whose curves share no place is left out, and counted out.
    apart = lifted[:2] + [_curve([(50, 200, 50, 0.9), (60, 240, 60, 0.9)])]
    assert paired_difference(apart, base, "step").n == 2
    assert paired_difference(apart[2:], base[2:], "step") is None
    with pytest.raises(ValueError, match="one curve per seed"):
        paired_difference(lifted, base[:2], "step")


def test_the_unpaired_difference_resamples_each_group_on_its_own():
    # [0.4, 0.4] against [0.1, 0.3]: A's resample means are 0.4; B's 0.1, 0.2, 0.3 (1/4, 1/2, 1/4).
    ci = unpaired_difference([0.4, 0.4], [0.1, 0.3])
    assert (ci.diff, ci.low, ci.high) == pytest.approx((0.2, 0.1, 0.3)) and ci.excludes_zero()
    level = unpaired_difference([0.2, 0.4], [0.3, 0.3])
    assert (level.diff, level.low, level.high) == pytest.approx((0.0, -0.1, 0.1)) and not level.excludes_zero()
    one = unpaired_difference([0.4, 0.3], [0.2])  # one control: no interval
    assert one.diff == pytest.approx(0.15) and one.low is None and one.n == 1


def test_a_runs_curve_from_its_evaluations_and_records():
    evals = [{"step": 0, "greedy": 0.2, "sampled": 0.1}, {"step": 2, "greedy": 0.4, "sampled": 0.3},
             {"step": 3, "greedy": None, "sampled": 0.35}]
    records = [{"step": 1, "time": 100.0, "step_time": 2.0}, {"step": 2, "time": 103.0}, {"step": 3, "time": 104.5}]
    # The first step began at 100 - 2 = 98; 4 own groups a step.
    assert curve_points(evals, records, 4, "greedy") == [Point(0, 0, 0.0, 0.2), Point(2, 8, 5.0, 0.4)]
    assert curve_points(evals, records, 4, "sampled")[-1] == Point(3, 12, 6.5, 0.35)
