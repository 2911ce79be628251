"""node/observe/paired.py by hand: reading curves at equal steps, own generation and wall-clock,
the paired difference over seeds, and its t intervals: by hand on small cases, against scipy's
Welch test, and their coverage by simulation (95% at 5 seeds, where the percentile bootstrap they
replace covered 84%)."""

from __future__ import annotations

import numpy as np
import pytest

from swarm_node.node.observe.paired import (Point, curve_points, mean_interval, paired_comparison,
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


def test_the_t_interval_by_hand():
    # Seeds' differences 0.1, 0.2, 0.3: mean 0.2, s = 0.1, t(0.975, 2) = 4.303, so the half-width
    # is 4.303 * 0.1 / sqrt(3) = 0.2484: [-0.048, 0.448]. Three seeds this spread cannot tell.
    ci = mean_interval([0.1, 0.2, 0.3])
    assert ci.diff == pytest.approx(0.2) and ci.n == 3 and ci.level == 0.95
    assert (ci.low, ci.high) == pytest.approx((0.2 - 0.24841, 0.2 + 0.24841), abs=1e-5)
    assert ci.low == pytest.approx(-0.048, abs=5e-4) and ci.high == pytest.approx(0.448, abs=5e-4)
    assert not ci.excludes_zero()
    # Five seeds 0.1, 0.2, 0.3, 0.2, 0.2: s = sqrt(0.02 / 4) = 0.0707, t(0.975, 4) = 2.776,
    # half-width 2.776 * 0.0707 / sqrt(5) = 0.0878: [0.112, 0.288], above 0.
    five = mean_interval([0.1, 0.2, 0.3, 0.2, 0.2])
    assert (five.low, five.high) == pytest.approx((0.2 - 0.08780, 0.2 + 0.08780), abs=1e-5) and five.excludes_zero()
    # Two seeds -0.1 and 0.1: s = 0.1414, t(0.975, 1) = 12.706, half-width 12.706 * 0.1 = 1.271.
    two = mean_interval([-0.1, 0.1])
    assert (two.diff, two.low, two.high) == pytest.approx((0.0, -1.27062, 1.27062), abs=1e-5)
    assert mean_interval([0.3, 0.3, 0.3]) == mean_interval([0.3, 0.3, 0.3])  # no randomness
    same = mean_interval([0.3, 0.3, 0.3])  # no spread: a zero-width interval
    assert (same.low, same.high) == pytest.approx((0.3, 0.3)) and same.excludes_zero()
    one = mean_interval([0.3])  # one seed: a mean, no interval
    assert one.diff == 0.3 and one.low is None and one.high is None and not one.excludes_zero()
    assert mean_interval([0.1, 0.2, 0.3], level=0.9).high < ci.high  # t(0.95, 2) = 2.920
    with pytest.raises(ValueError):
        mean_interval([])


def _coverage(draw, experiments: int = 4000) -> tuple[float, float]:
    """The share of ``experiments`` intervals (``draw`` makes one from a seeded generator) holding
    the true difference 0.1, and the share wholly above it (the nominal one-sided rate is 2.5%)."""
    rng = np.random.default_rng(20240537)
    hits = above = 0
    for _ in range(experiments):
        iv = draw(rng)
        hits += iv.low <= 0.1 <= iv.high
        above += iv.low > 0.1
    return hits / experiments, above / experiments


def test_the_paired_interval_covers_the_true_difference_95_percent_of_the_time_at_five_seeds():
    """4,000 simulated 5-seed experiments whose seeds' differences are normal around a known 0.1.
    A percentile bootstrap over the seeds covered 0.84 here (its 2.5th and 97.5th resample
    percentiles are narrower than the mean's sampling spread at n = 5) and fell wholly above the
    truth 8% of the time; the t interval must be close to 95% and 2.5%."""
    cover, above = _coverage(lambda rng: mean_interval(rng.normal(0.1, 0.05, 5)))
    assert 0.93 <= cover <= 0.97, cover
    assert above <= 0.04, above
    small, _ = _coverage(lambda rng: mean_interval(rng.normal(0.1, 0.05, 2)), 2000)  # 2 seeds too (0.50 before)
    assert 0.92 <= small <= 0.98, small


def test_the_paired_difference_over_seeds():
    """Three seeds where arm A is arm B lifted by 0.1, 0.2 and 0.3 everywhere: the differences at
    every axis are those, so the interval is [-0.048, 0.448] (as above)."""
    base = [_curve([(0, 0, 0, 0.1), (10, 40, 10, 0.2), (20, 80, 20, 0.3), (30, 120, 30, 0.3)])] * 3
    lifted = [[Point(p.step, p.own_groups, p.seconds, p.score + d) for p in c] for c, d in zip(base, (0.1, 0.2, 0.3))]
    out = paired_comparison(lifted, base)
    assert set(out) == {"step", "own_groups", "seconds"}
    for ci in out.values():
        assert (ci.diff, ci.low, ci.high, ci.n) == pytest.approx((0.2, 0.2 - 0.24841, 0.2 + 0.24841, 3), abs=1e-5)
    # A seed whose curves share no place is left out, and counted out.
    apart = lifted[:2] + [_curve([(50, 200, 50, 0.9), (60, 240, 60, 0.9)])]
    assert paired_difference(apart, base, "step").n == 2
    assert paired_difference(apart[2:], base[2:], "step") is None
    with pytest.raises(ValueError, match="one curve per seed"):
        paired_difference(lifted, base[:2], "step")


def test_the_unpaired_difference_is_welchs_t_interval():
    # [0.4, 0.4] against [0.1, 0.3]: A has no spread, so the degrees of freedom are B's alone,
    # (0.01)^2 / (0.01^2 / 1) = 1, and the half-width t(0.975, 1) * sqrt(0.02 / 2) = 12.706 * 0.1.
    ci = unpaired_difference([0.4, 0.4], [0.1, 0.3])
    assert (ci.diff, ci.low, ci.high) == pytest.approx((0.2, 0.2 - 1.27062, 0.2 + 1.27062), abs=1e-5)
    assert not ci.excludes_zero() and ci.n == 2
    # Unequal sizes and spreads: scipy's Welch test (an independent implementation) agrees.
    from scipy import stats
    a, b = [0.5, 0.3, 0.4, 0.45], [0.1, 0.3, 0.25]
    ref = stats.ttest_ind(a, b, equal_var=False).confidence_interval(0.95)
    got = unpaired_difference(a, b)
    assert (got.low, got.high) == pytest.approx((ref.low, ref.high)) and got.n == 3
    flat = unpaired_difference([0.2, 0.2], [0.1, 0.1])  # no spread on either side
    assert (flat.diff, flat.low, flat.high) == pytest.approx((0.1, 0.1, 0.1))
    one = unpaired_difference([0.4, 0.3], [0.2])  # one on a side: no interval
    assert one.diff == pytest.approx(0.15) and one.low is None and one.n == 1
    with pytest.raises(ValueError):
        unpaired_difference([], [0.1])
    # Its coverage, 5 against 5 with unequal spreads: close to 95% (the bootstrap gave 0.85).
    cover, _ = _coverage(lambda rng: unpaired_difference(rng.normal(0.4, 0.02, 5), rng.normal(0.3, 0.08, 5)))
    assert 0.93 <= cover <= 0.97, cover


def test_a_runs_curve_from_its_evaluations_and_records():
    evals = [{"step": 0, "greedy": 0.2, "sampled": 0.1}, {"step": 2, "greedy": 0.4, "sampled": 0.3},
             {"step": 3, "greedy": None, "sampled": 0.35}]
    records = [{"step": 1, "time": 100.0, "step_time": 2.0}, {"step": 2, "time": 103.0}, {"step": 3, "time": 104.5}]
    # The first step began at 100 - 2 = 98; 4 own groups a step.
    assert curve_points(evals, records, 4, "greedy") == [Point(0, 0, 0.0, 0.2), Point(2, 8, 5.0, 0.4)]
    assert curve_points(evals, records, 4, "sampled")[-1] == Point(3, 12, 6.5, 0.35)
