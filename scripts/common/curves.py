"""The correctness curves the experiment reports are built from: a run's curve from its metrics,
the statistics over a WINDOW-step rolling mean (final reward, first step reaching a target, worst
dip), and the plot of mean curves per variant."""

from __future__ import annotations

import statistics
from pathlib import Path

from node.observe.plots import rolling_mean  # importable: the package puts the repository root on sys.path

WINDOW = 20  # steps in the rolling mean and in "final" (the last WINDOW steps)


def correctness(recs: list[dict]) -> list[float]:
    """Per step, the mean correctness of the node's own completions."""
    return [r.get("correct") or 0.0 for r in recs]


def final(curve: list[float]) -> float:
    """The mean of the last WINDOW steps: a run's final reward."""
    return statistics.mean(curve[-WINDOW:])


def first_reach(curve: list[float], target: float) -> int | None:
    """The first step whose WINDOW-step rolling mean reaches ``target``, or None."""
    for i, v in enumerate(rolling_mean(curve, WINDOW)):
        if i + 1 >= WINDOW and v >= target:
            return i + 1
    return None


def worst_dip(curve: list[float]) -> float:
    """The largest fall of the rolling mean below its running peak: a collapse shows as a large dip."""
    peak, dip = 0.0, 0.0
    for i, v in enumerate(rolling_mean(curve, WINDOW)):
        if i + 1 >= WINDOW:
            peak = max(peak, v)
            dip = max(dip, peak - v)
    return dip


def plot_mean_curves(curves: dict[str, list[list[float]]], path: Path, ylabel: str, title: str = "") -> None:
    """One line per label: the rolling mean of the step-wise mean over that label's curves."""
    plot_panels({title: curves}, path, ylabel)


def plot_panels(panels: dict[str, dict[str, list[list[float]]]], path: Path, ylabel: str) -> None:
    """Side-by-side panels (title → label → curves), each drawn as in ``plot_mean_curves``, on a
    shared y axis so the panels compare."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(panels), figsize=(8 if len(panels) == 1 else 4.5 * len(panels), 4),
                             sharey=True, squeeze=False)
    for ax, (title, curves) in zip(axes[0], panels.items()):
        for label, cs in curves.items():
            n = min(len(c) for c in cs)
            mean = [statistics.mean(c[i] for c in cs) for i in range(n)]
            ax.plot(range(1, n + 1), rolling_mean(mean, WINDOW), label=label)
        ax.set_xlabel("step")
        if title:
            ax.set_title(title)
        ax.grid(alpha=0.3)
        ax.legend()
    axes[0][0].set_ylabel(f"{ylabel} ({WINDOW}-step mean)")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=100)
    plt.close(fig)
