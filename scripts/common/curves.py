"""The curves the experiment reports are built from: a run's correctness curve from its metrics,
the statistics over a WINDOW-step rolling mean (final reward, first step reaching a target, worst
dip), a node's held-out curve (one point per evaluation: sparse, so read as it is, without a
rolling mean), and the plot of mean curves per variant."""

from __future__ import annotations

import statistics
from pathlib import Path

from swarm_node.node.observe.held_out import held_out_score  # importable: the package puts the repository root on sys.path
from swarm_node.node.observe.plots import rolling_mean

WINDOW = 20  # steps in the rolling mean and in "final" (the last WINDOW steps)

Curve = list[tuple[int, float]]  # (step, held-out score) at each evaluation, step 0 (before training) first


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


def held_out_curve(evals: list[dict]) -> Curve:
    """A node's held-out score at each of its evaluations (node/observe/held_out.py's
    ``evaluations``): greedy pass@1, or sampled where it made no greedy completions."""
    return [(ev["step"], score) for ev in evals if (score := held_out_score(ev)) is not None]


def first_reach_at(curve: Curve, target: float) -> int | None:
    """The first evaluated step whose score reaches ``target``, or None."""
    return next((step for step, score in curve if score >= target), None)


def mean_at_steps(curves: list[Curve]) -> Curve:
    """The mean of sparse curves at the steps every one of them evaluated."""
    steps = sorted(set.intersection(*(set(s for s, _ in c) for c in curves)))
    by_step = [dict(c) for c in curves]
    return [(s, statistics.mean(c[s] for c in by_step)) for s in steps]


def plot_mean_curves(curves: dict[str, list[list[float]]] | dict[str, list[Curve]], path: Path, ylabel: str,
                     title: str = "", sparse: bool = False) -> None:
    """One line per label: the rolling mean of the step-wise mean over that label's curves, or with
    ``sparse`` (held-out curves) their mean at the evaluated steps, a marker per evaluation."""
    plot_panels({title: curves}, path, ylabel, sparse)


def plot_panels(panels: dict[str, dict], path: Path, ylabel: str, sparse: bool = False) -> None:
    """Side-by-side panels (title → label → curves), each drawn as in ``plot_mean_curves``, on a
    shared y axis so the panels compare."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(panels), figsize=(8 if len(panels) == 1 else 4.5 * len(panels), 4),
                             sharey=True, squeeze=False)
    for ax, (title, curves) in zip(axes[0], panels.items()):
        for label, cs in curves.items():
            if sparse:
                m = mean_at_steps(cs)
                ax.plot([s for s, _ in m], [v for _, v in m], marker="o", label=label)
                continue
            n = min(len(c) for c in cs)
            mean = [statistics.mean(c[i] for c in cs) for i in range(n)]
            ax.plot(range(1, n + 1), rolling_mean(mean, WINDOW), label=label)
        ax.set_xlabel("step")
        if title:
            ax.set_title(title)
        ax.grid(alpha=0.3)
        ax.legend()
    axes[0][0].set_ylabel(ylabel if sparse else f"{ylabel} ({WINDOW}-step mean)")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=100)
    plt.close(fig)
