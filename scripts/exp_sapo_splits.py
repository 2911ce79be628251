"""SAPO's split study on the embedded task: local/external = 8/0, 6/2, 4/4, 2/6 at the same budget.

    python scripts/exp_sapo_splits.py                               # 4 nodes, 3 seeds, 200 steps
    python scripts/exp_sapo_splits.py --splits 8/0 4/4 --seeds 0 --steps 60 --tag quick

Every run is ``swarm-node sim --nodes N`` on the embedded default model (level-1 tasks). Each
step a node trains on 8 groups of 8 completions: I it generated, J from its peers (I + J = 8,
so every split costs the same generation and learning per step; 8/0 shares nothing and is the
isolated baseline, run as a swarm so that it shares the machine the same way). Per run and node:
correctness of the node's *own* completions per step (its policy's performance).

Reported per split (means over seeds and nodes, with the spread over seeds):
- cumulative reward: Σ over steps of the step's mean correctness (SAPO reports cumulative reward);
- final reward: mean correctness over the last 20 steps;
- steps to the baseline's final reward: the first step where a node's 20-step rolling mean reaches
  the 8/0 final reward of the same seed, as a fraction of the run (≤ 0.6 is the goal in issue 4).

Writes ``exp_sapo_splits[-TAG].md``/``.json``/``.png`` into ``--out`` (docs/results) and keeps
every run folder under ``--runs``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from node.metrics import read_metrics  # noqa: E402
from node.plots import rolling_mean  # noqa: E402

WINDOW = 20


def run_one(args, split: str, seed: int) -> Path:
    local, external = (int(x) for x in split.split("/"))
    run_dir = args.runs / f"{split.replace('/', '-')}-s{seed}"
    if (run_dir / "summary.json").exists() and not args.rerun:
        print(f"{run_dir}: done already (--rerun to redo)", flush=True)
        return run_dir
    cmd = [sys.executable, "-m", "node.cli", "sim", "--nodes", str(args.nodes), "--transport", args.transport,
           "--run.dir", str(run_dir), "--train.steps", str(args.steps), "--train.seed", str(seed * 100),
           "--generation.prompts_per_step", str(local + external), "--swarm.external_groups", str(external),
           "--swarm.round_seconds", str(args.round_seconds), "--run.progress", "plain",
           "--run.checkpoint_every", "0"]
    t0 = time.time()
    print(f"{split} seed {seed}: {' '.join(cmd[2:])}", flush=True)
    subprocess.run(cmd, check=True, cwd=ROOT, env=dict(os.environ, OMP_NUM_THREADS="1"),
                   stdout=subprocess.DEVNULL)
    print(f"  {time.time() - t0:.0f} s", flush=True)
    return run_dir


def node_curves(run_dir: Path, nodes: int) -> list[list[float]]:
    return [[r.get("correct") or 0.0 for r in read_metrics(run_dir / f"node{i}" / "metrics.jsonl")]
            for i in range(nodes)]


def first_reach(curve: list[float], target: float) -> int | None:
    for i, v in enumerate(rolling_mean(curve, WINDOW)):
        if i + 1 >= WINDOW and v >= target:
            return i + 1
    return None


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--splits", nargs="+", default=["8/0", "6/2", "4/4", "2/6"])
    ap.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2])
    ap.add_argument("--nodes", type=int, default=4)
    ap.add_argument("--steps", type=int, default=200)
    ap.add_argument("--round-seconds", type=float, default=1.2, help="above one step's compute with all nodes on the machine")
    ap.add_argument("--transport", default="memory", choices=["memory", "hivemind"])
    ap.add_argument("--runs", type=Path, default=ROOT / "runs" / "exp_sapo_splits")
    ap.add_argument("--out", type=Path, default=ROOT / "docs" / "results")
    ap.add_argument("--tag", default="")
    ap.add_argument("--rerun", action="store_true")
    args = ap.parse_args()
    if "8/0" not in args.splits:
        ap.error("the 8/0 split is the baseline; include it")

    curves = {s: {seed: node_curves(run_one(args, s, seed), args.nodes) for seed in args.seeds} for s in args.splits}
    result = {"args": {k: str(v) for k, v in vars(args).items()}, "splits": {}}
    for s in args.splits:
        per_seed = []
        for seed in args.seeds:
            base_final = statistics.mean(statistics.mean(c[-WINDOW:]) for c in curves["8/0"][seed])
            nodes = curves[s][seed]
            reach = [first_reach(c, base_final) for c in nodes]
            per_seed.append({
                "cumulative": statistics.mean(sum(c) for c in nodes),
                "final": statistics.mean(statistics.mean(c[-WINDOW:]) for c in nodes),
                "reach_frac": statistics.mean(r / args.steps if r else 1.0 for r in reach),
                "reached": sum(r is not None for r in reach),
            })
        result["splits"][s] = {
            "per_seed": per_seed,
            **{k: statistics.mean(p[k] for p in per_seed) for k in ("cumulative", "final", "reach_frac")},
            **{f"{k}_sd": statistics.pstdev(p[k] for p in per_seed) for k in ("cumulative", "final")},
        }
    base = result["splits"]["8/0"]
    tag = f"-{args.tag}" if args.tag else ""
    md = [f"# SAPO split study: {args.nodes} nodes, embedded default model, level-1 tasks", "",
          f"`python scripts/exp_sapo_splits.py {' '.join(sys.argv[1:])}`", "",
          f"{args.steps} steps per run, seeds {args.seeds}, transport {args.transport}, rounds of "
          f"{args.round_seconds} s. Each step a node trains on 8 groups of 8 completions: I its own, J its peers'. "
          "Correctness of each node's own completions; means over nodes and seeds (± spread over seeds).", "",
          "| local/external | cumulative correctness | vs 8/0 | final (last 20 steps) | vs 8/0 | steps to 8/0's final (fraction of run) |",
          "|---|---:|---:|---:|---:|---:|"]
    for s, r in result["splits"].items():
        md.append(f"| {s} | {r['cumulative']:.1f} ± {r['cumulative_sd']:.1f} | {r['cumulative'] / base['cumulative']:.2f}x | "
                  f"{r['final']:.3f} ± {r['final_sd']:.3f} | {r['final'] / base['final']:.2f}x | {r['reach_frac']:.2f} |")
    md += ["", "Steps to 8/0's final: per node, the first step whose 20-step rolling mean reaches the 8/0 "
               "final correctness of the same seed (1.00 = never within the run); 8/0 itself reaches its "
               "own final by definition late in the run. SAPO reported 562 / 854 / 1093 / 946 cumulative "
               "reward for 8/0 / 6/2 / 4/4 / 2/6 on its task and models."]
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / f"exp_sapo_splits{tag}.json").write_text(json.dumps(result, indent=2))
    (args.out / f"exp_sapo_splits{tag}.md").write_text("\n".join(md) + "\n")
    plot(curves, args, args.out / f"exp_sapo_splits{tag}.png")
    md.append(f"\n![correctness per split](exp_sapo_splits{tag}.png)")
    (args.out / f"exp_sapo_splits{tag}.md").write_text("\n".join(md) + "\n")
    print("\n".join(md))


def plot(curves, args, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(8, 4))
    for s, by_seed in curves.items():
        all_nodes = [c for nodes in by_seed.values() for c in nodes]
        n = min(len(c) for c in all_nodes)
        mean = [statistics.mean(c[i] for c in all_nodes) for i in range(n)]
        ax.plot(range(1, n + 1), rolling_mean(mean, WINDOW), label=f"{s} (local/external)")
    ax.set_xlabel("step")
    ax.set_ylabel(f"correctness ({WINDOW}-step mean)")
    ax.grid(alpha=0.3)
    ax.legend()
    ax.set_title(f"SAPO splits: {args.nodes} nodes, mean over nodes and seeds")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


if __name__ == "__main__":
    main()
