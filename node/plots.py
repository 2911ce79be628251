"""Reward-curve plots from a run's metrics.jsonl (PNG, matplotlib's headless Agg backend)."""

from __future__ import annotations

from pathlib import Path

from node.errors import NodeError
from node.metrics import read_metrics

__all__ = ["plot_reward_curve", "rolling_mean"]


def rolling_mean(xs: list[float], window: int) -> list[float]:
    out, acc = [], 0.0
    for i, x in enumerate(xs):
        acc += x
        if i >= window:
            acc -= xs[i - window]
        out.append(acc / min(i + 1, window))
    return out


def plot_reward_curve(metrics_path: Path, out_path: Path, title: str = "", window: int = 10) -> Path:
    """Correctness and total reward per step (raw and rolling mean), ESS fraction and LR factor."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    recs = [r for r in read_metrics(metrics_path) if "step" in r]
    if not recs:
        raise NodeError(f"no step records in {metrics_path}: nothing to plot")
    steps = [r["step"] for r in recs]
    fig, (ax1, ax2) = plt.subplots(2, 1, figsize=(8, 6), sharex=True,
                                   gridspec_kw={"height_ratios": [2, 1]})
    for key, color in (("correct", "tab:green"), ("reward", "tab:blue")):
        ys = [r.get(key) or 0.0 for r in recs]
        ax1.plot(steps, ys, color=color, alpha=0.25, linewidth=0.8)
        ax1.plot(steps, rolling_mean(ys, window), color=color, label=f"{key} ({window}-step mean)")
    ax1.set_ylabel("reward")
    ax1.set_ylim(bottom=0)
    ax1.legend(loc="lower right")
    ax1.set_title(title or str(metrics_path.parent.name))
    ax1.grid(alpha=0.3)
    for key, color in (("rho", "tab:purple"), ("lr_factor", "tab:orange")):
        ax2.plot(steps, [r.get(key) or 0.0 for r in recs], color=color, label=key)
    ax2.set_ylabel("ESS/B, LR factor")
    ax2.set_xlabel("step")
    ax2.set_ylim(0, 1.05)
    ax2.legend(loc="lower right")
    ax2.grid(alpha=0.3)
    fig.tight_layout()
    out_path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out_path, dpi=100)
    plt.close(fig)
    return out_path
