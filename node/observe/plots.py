"""Reward-curve and held-out plots from a run's metrics.jsonl (PNG, matplotlib's headless Agg backend)."""

from __future__ import annotations

from pathlib import Path

from swarm_node.node.errors import NodeError
from swarm_node.node.observe.held_out import evaluations, held_out_score, last_eval
from swarm_node.node.observe.metrics import read_metrics

__all__ = ["plot_folder", "plot_held_out", "plot_reward_curve", "plot_swarm", "rolling_mean"]


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


def plot_held_out(metrics_path: Path, out_path: Path, title: str = "") -> Path:
    """Held-out correctness at each evaluation: greedy pass@1 per family (thin) and overall
    (thick), and sampled pass@1 overall (dashed); a node that evaluates without greedy shows
    sampled per family."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    evals = evaluations(read_metrics(metrics_path), metrics_path.parent)
    if not evals:
        raise NodeError(f"no held-out evaluation in {metrics_path}: nothing to plot (eval.every 0?)")
    steps = [e["step"] for e in evals]
    key = "greedy" if evals[-1].get("greedy") is not None else "sampled"
    fig, ax = plt.subplots(figsize=(8, 4))
    for family in evals[-1]["families"]:
        ax.plot(steps, [_nan(e["families"].get(family, {}).get(key)) for e in evals], marker=".",
                linewidth=0.9, alpha=0.7, label=family)
    ax.plot(steps, [_nan(e.get(key)) for e in evals], color="black", linewidth=2, marker="o", label=f"all ({key})")
    if key == "greedy" and evals[-1].get("sampled") is not None:
        ax.plot(steps, [_nan(e.get("sampled")) for e in evals], color="black", linestyle="--", label="all (sampled)")
    ax.set_xlabel("step")
    ax.set_ylabel(f"held-out pass@1 ({key})")
    ax.set_ylim(0, 1.05)
    ax.grid(alpha=0.3)
    ax.legend(loc="upper left", fontsize="small")
    ax.set_title(title or f"{metrics_path.parent.name}: held-out correctness ({evals[-1]['n']} tasks)")
    fig.tight_layout()
    out_path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out_path, dpi=100)
    plt.close(fig)
    return out_path


def _nan(v: float | None) -> float:
    return float("nan") if v is None else v


def plot_swarm(run_dir: Path, n_nodes: int, window: int = 10, control: int = 0) -> list[Path]:
    """``reward.png`` (correctness per node, rolling mean), ``ess.png`` (ESS/B per node) and, when
    the nodes evaluated, ``held_out.png`` (held-out correctness per node, from the evaluation before
    training on) for a simulated swarm's run folder; nodes without metrics are skipped. The last
    ``control`` nodes are the simulation's isolated controls (node/sim/control.py): drawn black and
    dashed, so the swarm's lines read against them."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    series, dirs = {}, {}
    for i in range(n_nodes):
        recs = [r for r in read_metrics(run_dir / f"node{i}" / "metrics.jsonl") if "step" in r]
        if recs:
            name = f"node{i}" + (" (control)" if i >= n_nodes - control else "")
            series[name], dirs[name] = recs, run_dir / f"node{i}"
    if not series:
        return []

    def style(name: str) -> dict:
        return {"color": "black", "linestyle": "--", "linewidth": 2.0} if name.endswith("(control)") else {}

    out = []
    for key, fname, label, smooth in (("correct", "reward.png", f"correctness ({window}-step mean)", True),
                                      ("rho", "ess.png", "ESS / B", False)):
        fig, ax = plt.subplots(figsize=(8, 4))
        for name, recs in series.items():
            ys = [r.get(key) if r.get(key) is not None else float("nan") for r in recs]
            ax.plot([r["step"] for r in recs], rolling_mean([0.0 if y != y else y for y in ys], window) if smooth else ys,
                    label=name, **({"linewidth": 1.2} | style(name)))
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
    evals = {name: evaluations(recs, dirs[name]) for name, recs in series.items()}
    if any(evals.values()):
        fig, ax = plt.subplots(figsize=(8, 4))
        for name, ev in evals.items():
            if ev:
                ax.plot([e["step"] for e in ev], [_nan(held_out_score(e)) for e in ev], marker="o", label=name,
                        **style(name))
        ax.set_xlabel("step")
        ax.set_ylabel("held-out pass@1 (greedy, or sampled)")
        ax.set_ylim(0, 1.05)
        ax.grid(alpha=0.3)
        ax.legend(loc="upper left", fontsize="small")
        ax.set_title(f"{run_dir.name}: held-out correctness per node" + (", swarm against control" if control else ""))
        fig.tight_layout()
        fig.savefig(run_dir / "held_out.png", dpi=100)
        plt.close(fig)
        out.append(run_dir / "held_out.png")
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
            meta = json.loads(sim.read_text())
            n, control = int(meta["nodes"]), int(meta.get("control", 0))
        except (OSError, ValueError, KeyError, TypeError, AttributeError) as e:
            raise NodeError(f"{sim} is unreadable ({e}): cannot tell how many nodes the simulation had") from None
        out = plot_swarm(run_dir, n, control=control)
        for i in range(n):
            node = run_dir / f"node{i}"
            if read_metrics(node / "metrics.jsonl"):
                out += _run_plots(node)
        if not out:
            raise NodeError(f"{run_dir} is a simulation folder whose nodes ({run_dir}/node0 ... node{n - 1}) "
                            f"have no step records yet: nothing to plot")
        return out
    if not (run_dir / "metrics.jsonl").exists():
        raise NodeError(f"{run_dir} has no metrics.jsonl: it is not a run folder (pass the --run.dir of "
                        f"a train or join run, a node's folder such as runs/demo/node0, or a sim's folder)")
    return _run_plots(run_dir)


def _run_plots(run_dir: Path) -> list[Path]:
    """One run folder's plots: its reward curve, and its held-out plot when it evaluated."""
    out = [plot_reward_curve(run_dir / "metrics.jsonl", run_dir / "reward_curve.png")]
    if last_eval(read_metrics(run_dir / "metrics.jsonl")) is not None:
        out.append(plot_held_out(run_dir / "metrics.jsonl", run_dir / "held_out.png"))
    return out
