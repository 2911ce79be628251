"""Reward-curve plots from a run's metrics.jsonl (PNG, matplotlib's headless Agg backend)."""

from __future__ import annotations

from pathlib import Path

from node.errors import NodeError
from node.observe.metrics import read_metrics

__all__ = ["plot_folder", "plot_reward_curve", "plot_swarm", "rolling_mean"]


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


def plot_swarm(run_dir: Path, n_nodes: int, window: int = 10) -> list[Path]:
    """``reward.png`` (correctness per node, rolling mean) and ``ess.png`` (ESS/B per node) for a
    simulated swarm's run folder; nodes without metrics are skipped."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    series = {}
    for i in range(n_nodes):
        recs = [r for r in read_metrics(run_dir / f"node{i}" / "metrics.jsonl") if "step" in r]
        if recs:
            series[f"node{i}"] = recs
    if not series:
        return []
    out = []
    for key, fname, label, smooth in (("correct", "reward.png", f"correctness ({window}-step mean)", True),
                                      ("rho", "ess.png", "ESS / B", False)):
        fig, ax = plt.subplots(figsize=(8, 4))
        for name, recs in series.items():
            ys = [r.get(key) if r.get(key) is not None else float("nan") for r in recs]
            ax.plot([r["step"] for r in recs], rolling_mean([0.0 if y != y else y for y in ys], window) if smooth else ys,
                    label=name, linewidth=1.2)
        ax.set_xlabel("step")
        ax.set_ylabel(label)
        top = max((y for recs in series.values() for y in (r.get(key) for r in recs) if y is not None), default=1.0)
        ax.set_ylim(0, 1.05 if not smooth else min(1.05, max(0.1, top * 1.1)))
        ax.grid(alpha=0.3)
        ax.legend(loc="lower right", fontsize="small")
        ax.set_title(f"{run_dir.name}: {label} per node")
        fig.tight_layout()
        path = run_dir / fname
        fig.savefig(path, dpi=100)
        plt.close(fig)
        out.append(path)
    return out


def plot_folder(run_dir: Path) -> list[Path]:
    """``swarm-node plot``: redraw a run folder's plots, or a simulated swarm's (its reward.png
    and ess.png, and each node's reward_curve.png); errors name what the folder is missing."""
    import json

    run_dir = Path(run_dir)
    if not run_dir.exists():
        raise NodeError(f"no such folder: {run_dir}")
    if not run_dir.is_dir():
        raise NodeError(f"{run_dir} is a file: pass a run folder (the --run.dir of a run)")
    sim = run_dir / "sim.json"
    if sim.exists():
        try:
            n = int(json.loads(sim.read_text())["nodes"])
        except (OSError, ValueError, KeyError, TypeError) as e:
            raise NodeError(f"{sim} is unreadable ({e}): cannot tell how many nodes the simulation had") from None
        out = plot_swarm(run_dir, n)
        for i in range(n):
            node = run_dir / f"node{i}"
            if read_metrics(node / "metrics.jsonl"):
                out.append(plot_reward_curve(node / "metrics.jsonl", node / "reward_curve.png"))
        if not out:
            raise NodeError(f"{run_dir} is a simulation folder whose nodes ({run_dir}/node0 ... node{n - 1}) "
                            f"have no step records yet: nothing to plot")
        return out
    if not (run_dir / "metrics.jsonl").exists():
        raise NodeError(f"{run_dir} has no metrics.jsonl: it is not a run folder (pass the --run.dir of "
                        f"a train or join run, a node's folder such as runs/demo/node0, or a sim's folder)")
    return [plot_reward_curve(run_dir / "metrics.jsonl", run_dir / "reward_curve.png")]
