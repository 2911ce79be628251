"""Two arms of an experiment compared over seeds: the paired difference of their held-out curves at
equal steps, at equal own generation and at equal wall-clock, with a Student t 95% confidence
interval over seeds; and the unpaired difference of two groups' means, with Welch's t interval.

A seed's curve is its evaluations as ``Point``s: the step, the groups the node generated itself up
to it (``own_groups``: its I a step, never its peers'), the wall-clock seconds since its first step
began, and the held-out score. Reading two curves "at equal X" (X one of ``AXES``): the arm that
got less far along X sets the places, its last ``END_EVALUATIONS`` evaluations after step 0 (the end
score's, node/observe/held_out.py); the other arm's curve is read there by linear interpolation
between its evaluations; the seed's difference is A's mean there minus B's. At equal steps with
the same evaluation schedule this is the difference of the two end scores; at equal own
generation a 4/4 node (4 own groups a step) at step 200 meets an 8/0 node (8 a step) at step 100.

The interval (``mean_interval``): the n seeds' differences' mean ± t(0.975, n − 1) · s / √n, s their
sample standard deviation (n − 1 in the denominator). It is a 95% confidence interval for the true
mean difference on these held-out questions: valid as far as the seeds are independent and their
differences roughly normal. With few seeds it is wide, as it should be (t(0.975, 1) = 12.7,
t(0.975, 2) = 4.30, t(0.975, 4) = 2.78): an interval above 0 says arm A was ahead beyond what the
seeds' spread explains. It is not the range a rerun's mean would fall in (the mean of as many
fresh seeds lands inside it less often than 95%: about 88% at 5 seeds, 83% with many). It needs
two seeds (one gives a mean and no interval), and it covers only what varies with the seed: the
questions are the same in every run. (A percentile bootstrap over 2-5 seeds, used before, covered
50-84% at a nominal 95%; tests/node/observe/test_paired.py checks the coverage by simulation.)

``unpaired_difference``: two groups that share nothing pairing would cancel, mean(a) − mean(b)
± t(0.975, ν) · √(s_a²/n_a + s_b²/n_b), ν the Welch–Satterthwaite degrees of freedom; the same
caveats, and each group's values must be independent of each other (nodes of one swarm are not).

Pure: lists in, numbers out. scripts/exp_payoff.py builds the curves from its runs.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from swarm_node.node.observe.held_out import END_EVALUATIONS

__all__ = ["Point", "Interval", "AXES", "LEVEL", "END_EVALUATIONS", "curve_points", "value_at",
           "seed_difference", "seed_differences", "paired_difference", "paired_comparison", "mean_interval", "unpaired_difference"]

AXES = ("step", "own_groups", "seconds")
LEVEL = 0.95


@dataclass(frozen=True)
class Point:
    """One evaluation of one seed's run."""

    step: int
    own_groups: float  # groups the node generated itself up to this step
    seconds: float  # wall-clock since its first step began
    score: float  # held-out pass@1 (greedy, or sampled: the caller's choice)


@dataclass(frozen=True)
class Interval:
    """A mean difference (A − B) and its t confidence interval at ``level``; ``low``/``high`` are
    None when a side has fewer than two units (no spread to measure)."""

    diff: float
    low: float | None
    high: float | None
    n: int  # seeds paired (or, unpaired, the units of the smaller side)
    level: float = 0.95

    def excludes_zero(self) -> bool:
        return self.low is not None and (self.low > 0 or self.high < 0)


def curve_points(evals: Sequence[dict], records: Sequence[dict], own_per_step: float, metric: str) -> list[Point]:
    """A run's curve from its evaluations (node/observe/held_out.py ``evaluations``: step 0 first
    when made) and its metrics records: own groups = step x ``own_per_step`` (a node generates its I
    groups every step), seconds = a step's record ``time`` minus when the first step began (its
    ``time`` less its ``step_time``; step 0 is at 0). An evaluation without ``metric`` is left out."""
    times = {r["step"]: r["time"] for r in records if "step" in r and "time" in r}
    first = next((r for r in records if "time" in r), None)
    start = first["time"] - (first.get("step_time") or 0.0) if first is not None else 0.0
    out = []
    for ev in evals:
        score, step = ev.get(metric), ev["step"]
        if score is None or (step and step not in times):
            continue
        out.append(Point(step, step * own_per_step, times[step] - start if step else 0.0, score))
    return out


def _axis(p: Point, axis: str) -> float:
    return getattr(p, axis)


def value_at(curve: Sequence[Point], axis: str, x: float) -> float | None:
    """The curve's score at ``x`` along ``axis``, linear between its evaluations; None outside them."""
    pts = sorted(curve, key=lambda p: _axis(p, axis))
    for lo, hi in zip(pts, pts[1:]):
        a, b = _axis(lo, axis), _axis(hi, axis)
        if a <= x <= b:
            return lo.score if b == a else lo.score + (hi.score - lo.score) * (x - a) / (b - a)
    return pts[0].score if len(pts) == 1 and _axis(pts[0], axis) == x else None


def seed_difference(a: Sequence[Point], b: Sequence[Point], axis: str, last: int = END_EVALUATIONS) -> float | None:
    """One seed's difference A − B at equal ``axis`` (module docstring): both read at the last
    ``last`` evaluations after step 0 of the arm that got less far along it. None when no such
    place is on both curves."""
    if axis not in AXES:
        raise ValueError(f"axis must be one of {AXES}, got {axis!r}")
    if not a or not b:
        return None
    shorter = a if max(_axis(p, axis) for p in a) <= max(_axis(p, axis) for p in b) else b
    trained = sorted((p for p in shorter if p.step > 0), key=lambda p: _axis(p, axis))
    places = [_axis(p, axis) for p in (trained or sorted(shorter, key=lambda p: _axis(p, axis)))[-last:]]
    pairs = [(va, vb) for x in places
             if (va := value_at(a, axis, x)) is not None and (vb := value_at(b, axis, x)) is not None]
    if not pairs:
        return None
    return statistics.fmean(va for va, _ in pairs) - statistics.fmean(vb for _, vb in pairs)


def _t(level: float, df: float) -> float:
    """The two-sided Student t quantile: t(1 − (1 − level) / 2, df)."""
    from scipy import stats  # lazily: only the comparisons need it, not every import of node.observe

    return float(stats.t.ppf(1 - (1 - level) / 2, df))


def _around(centre: float, half: float) -> tuple[float, float]:
    return centre - half, centre + half


def mean_interval(values: Sequence[float], level: float = LEVEL) -> Interval:
    """The mean of ``values`` (one per seed) and its Student t interval: mean ± t(level, n − 1) · s/√n,
    s the sample standard deviation (n − 1). Equal values give a zero-width interval."""
    v = np.asarray(values, dtype=float)
    if v.size == 0:
        raise ValueError("no values to take the mean of")
    mean = float(v.mean())
    n = int(v.size)
    if n < 2:
        return Interval(mean, None, None, n, level)
    se = float(v.std(ddof=1)) / math.sqrt(n)
    return Interval(mean, *_around(mean, _t(level, n - 1) * se if se > 0 else 0.0), n, level)


def seed_differences(a: Sequence[Sequence[Point]], b: Sequence[Sequence[Point]], axis: str) -> list[float]:
    """Each seed's ``seed_difference`` of ``a[i]`` against ``b[i]``, seeds whose curves share no
    place along ``axis`` left out (what a test over seeds, or the interval, is taken over)."""
    if len(a) != len(b):
        raise ValueError(f"paired arms need one curve per seed on each side, got {len(a)} and {len(b)}")
    return [d for ca, cb in zip(a, b) if (d := seed_difference(ca, cb, axis)) is not None]


def paired_difference(a: Sequence[Sequence[Point]], b: Sequence[Sequence[Point]], axis: str,
                      level: float = LEVEL) -> Interval | None:
    """Arm A against arm B over seeds: ``a[i]`` and ``b[i]`` are seed i's curves. The mean of the
    seeds' ``seed_difference`` and its t interval (``mean_interval``); a seed whose curves share no
    place along ``axis`` is left out (``n`` counts the rest); None when none is left."""
    diffs = seed_differences(a, b, axis)
    return mean_interval(diffs, level) if diffs else None


def paired_comparison(a: Sequence[Sequence[Point]], b: Sequence[Sequence[Point]],
                      level: float = LEVEL) -> dict[str, Interval | None]:
    """``paired_difference`` at equal steps, equal own generation and equal wall-clock."""
    return {axis: paired_difference(a, b, axis, level) for axis in AXES}


def unpaired_difference(a: Sequence[float], b: Sequence[float], level: float = LEVEL) -> Interval:
    """mean(a) − mean(b) for two groups that are not paired, with Welch's t interval: ± t(level, ν) ·
    √(s_a²/n_a + s_b²/n_b), ν the Welch–Satterthwaite degrees of freedom; no interval while either
    group has fewer than two. Each group's values must be independent draws."""
    va, vb = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    if va.size == 0 or vb.size == 0:
        raise ValueError("both groups need at least one value")
    diff = float(va.mean() - vb.mean())
    n = int(min(va.size, vb.size))
    if n < 2:
        return Interval(diff, None, None, n, level)
    qa, qb = float(va.var(ddof=1)) / va.size, float(vb.var(ddof=1)) / vb.size  # squared standard errors
    if qa + qb == 0:
        return Interval(diff, diff, diff, n, level)
    df = (qa + qb) ** 2 / (qa ** 2 / (va.size - 1) + qb ** 2 / (vb.size - 1))
    return Interval(diff, *_around(diff, _t(level, df) * math.sqrt(qa + qb)), n, level)
