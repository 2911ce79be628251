"""The soak's judging arithmetic, pure: a least-squares slope, growth between a window's ends,
the increase of a counter that restarts from 0 with its process, the steps a metrics file
records (none lost, none twice), and a rate over the parts of a phase left undisturbed."""

from __future__ import annotations

import statistics

END_SAMPLES = 3  # a window's start and end are each the mean of this many samples (one reading is noise)


def slope(ts: list[float], ys: list[float]) -> float | None:
    """The least-squares slope of ys over ts (units of y per unit of t); None under 2 points or
    when every t is the same."""
    if len(ts) < 2:
        return None
    mt, my = statistics.fmean(ts), statistics.fmean(ys)
    var = sum((t - mt) ** 2 for t in ts)
    if var == 0:
        return None
    return sum((t - mt) * (y - my) for t, y in zip(ts, ys)) / var


def ends(ys: list[float]) -> tuple[float, float] | None:
    """(start, end) of a window: the mean of its first and of its last ``END_SAMPLES`` values
    (fewer in a short window, never overlapping); None when it is empty."""
    if not ys:
        return None
    k = max(1, min(END_SAMPLES, len(ys) // 2))
    return statistics.fmean(ys[:k]), statistics.fmean(ys[-k:])


def growth(ys: list[float]) -> float | None:
    """The relative change from a window's start to its end (0.1 = 10% more); None when the
    window is empty or starts at 0."""
    e = ends(ys)
    if e is None or e[0] == 0:
        return None
    return (e[1] - e[0]) / e[0]


def counter_increase(values: list[int | None]) -> int:
    """How much a counter rose over readings in order, where a restarted process counts from 0
    again: a fall is a restart, and the new reading is all new (None: no reading, skipped)."""
    total, prev = 0, None
    for v in values:
        if v is None:
            continue
        if prev is not None:
            total += v - prev if v >= prev else v
        prev = v
    return total


def step_gaps(steps: list[int]) -> dict:
    """What a metrics.jsonl's step numbers say of its history: each step 1..last exactly once is
    continuous; ``missing`` are steps never recorded, ``duplicated`` recorded more than once."""
    seen: dict[int, int] = {}
    for s in steps:
        seen[s] = seen.get(s, 0) + 1
    last = max(steps, default=0)
    missing = [s for s in range(1, last + 1) if s not in seen]
    duplicated = sorted(s for s, n in seen.items() if n > 1)
    return {"records": len(steps), "last": last, "missing": missing, "duplicated": duplicated,
            "continuous": not missing and not duplicated}


def overlaps(a: tuple[float, float], b: tuple[float, float]) -> bool:
    return a[0] < b[1] and b[0] < a[1]


def undisturbed_rate(points: list[tuple[float, float]], start: float, end: float,
                     disturbed: list[tuple[float, float]]) -> tuple[float | None, float]:
    """A counter's rate per minute within [start, end] from (time, cumulative value) points,
    over the intervals between consecutive points that lie in the window and touch no disturbed
    window: (rate, minutes it was measured over); (None, 0) when no interval qualifies."""
    total, seconds = 0.0, 0.0
    for (t0, v0), (t1, v1) in zip(points, points[1:]):
        if t0 < start or t1 > end or any(overlaps((t0, t1), w) for w in disturbed):
            continue
        total += v1 - v0
        seconds += t1 - t0
    return (total / seconds * 60, seconds / 60) if seconds else (None, 0.0)
