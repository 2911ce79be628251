"""A 4-node swarm with generation overlapped with learning and APRIL partial rollouts, beside the
same swarm in the synchronous loop, from the same seeds.

    python scripts/exp_async_swarm.py                        # 4 nodes over hivemind, 100 steps, seed 0
    python scripts/exp_async_swarm.py --seeds 0 1 2          # three swarms a variant
    python scripts/exp_async_swarm.py --steps 30 --tag quick

Each variant is ``swarm-node sim --nodes 4 --transport hivemind`` on the demo's recipe
(docs/examples/swarm_demo.toml: level-2 counting, 4 local + 4 peer groups a step, held-out
evaluation every 25 steps); ``async`` adds ``--train.max_async 1 --generation.over_provision 0.5``.
Reported per variant, over the four nodes: envelopes rejected, steps with a non-finite loss,
staleness and rollouts dropped as stale, correctness of the nodes' own completions (first and last
20 steps) and the held-out greedy score at the start and the end. What it must show: nothing
rejected, no non-finite step, learning no worse than the synchronous swarm.
Writes ``exp_async_swarm[-TAG].{md,json,png}`` into ``--out``.
"""

from __future__ import annotations

import argparse
import math
import statistics
from pathlib import Path

from common import ROOT
from common.curves import WINDOW, correctness, final, plot_mean_curves
from common.processes import run_cli
from common.report import command_line, write_experiment_report

from swarm_node.node.observe.held_out import evaluations, held_out_score  # importable: common puts the repo root on sys.path
from swarm_node.node.observe.metrics import read_metrics

VARIANTS = {
    "sync": [],
    "async": ["--train.max_async", "1", "--generation.over_provision", "0.5"],
}
NODES = 4


def run_one(args, variant: str, seed: int) -> Path:
    return run_cli(["sim", "--nodes", str(NODES), "--transport", "hivemind", "--config",
                    str(ROOT / "docs" / "examples" / "swarm_demo.toml"), "--train.steps", str(args.steps),
                    "--train.seed", str(seed), "--run.resume", "false", "--run.progress", "plain",
                    *VARIANTS[variant]], args.runs / (variant if seed == 0 else f"{variant}-s{seed}"),
                   "summary.json", args.rerun)


def node_numbers(recs: list[dict], node_dir: Path) -> dict:
    steps = [r for r in recs if "step" in r]
    evals = evaluations(recs, node_dir)  # the one before training first
    c = correctness(steps)
    last = steps[-1]
    return {"steps": len(steps),
            "non_finite": sum(not (isinstance(r.get("loss"), float) and math.isfinite(r["loss"]))
                              for r in steps if "loss" in r),  # a null loss is a non-finite one
            "rejected": last.get("rejected_total", 0), "dropped_stale": sum(r.get("dropped_stale", 0) for r in steps),
            "groups_dropped_stale": last.get("groups_dropped_stale", 0),
            "staleness_max": max(r["staleness"] for r in steps),
            "correct_first": statistics.mean(c[:WINDOW]), "correct_last": final(c),
            "held_out_start": held_out_score(evals[0]) if evals else None,
            "held_out_end": held_out_score(evals[-1]) if evals else None,
            "mixed_version_completions": sum(r.get("april_mixed_versions", 0) for r in steps)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--steps", type=int, default=100)
    ap.add_argument("--seeds", nargs="+", type=int, default=[0])
    ap.add_argument("--runs", type=Path, default=ROOT / "runs" / "exp_async_swarm")
    ap.add_argument("--out", type=Path, default=ROOT / "docs" / "results")
    ap.add_argument("--tag", default="")
    ap.add_argument("--rerun", action="store_true")
    args = ap.parse_args()
    args.runs.mkdir(parents=True, exist_ok=True)
    result: dict = {"args": {k: str(v) for k, v in vars(args).items()}, "variants": {}}
    curves = {}
    for v in VARIANTS:
        nodes, curves[v] = [], []
        for seed in args.seeds:
            run_dir = run_one(args, v, seed)
            every = [read_metrics(run_dir / f"node{i}" / "metrics.jsonl") for i in range(NODES)]
            nodes += [{"seed": seed, **node_numbers(recs, run_dir / f"node{i}")} for i, recs in enumerate(every)]
            curves[v] += [correctness([r for r in recs if "step" in r]) for recs in every]
        mean = {k: statistics.mean(n[k] for n in nodes if n[k] is not None)
                for k in ("correct_first", "correct_last", "held_out_start", "held_out_end")}
        result["variants"][v] = {"nodes": nodes, **mean,
                                 **{k: sum(n[k] for n in nodes) for k in
                                    ("rejected", "non_finite", "dropped_stale", "groups_dropped_stale",
                                     "mixed_version_completions")},
                                 "staleness_max": max(n["staleness_max"] for n in nodes),
                                 "held_out_end_by_seed": {seed: statistics.mean(n["held_out_end"] for n in nodes
                                                                                if n["seed"] == seed)
                                                          for seed in args.seeds}}
    tag = f"-{args.tag}" if args.tag else ""
    md = ["# A swarm with overlap and partial rollouts, beside the synchronous swarm", "",
          f"`{command_line()}`", "",
          f"{NODES} nodes over hivemind on loopback, the demo's recipe (docs/examples/swarm_demo.toml), "
          f"{args.steps} steps, seeds {args.seeds}; `async` = `--train.max_async 1 --generation.over_provision 0.5`. "
          "Sums, or means over the four nodes and the seeds.", "",
          "| variant | rejected | non-finite steps | staleness max | own rollouts dropped stale | peer groups dropped stale "
          "| mixed-version completions | correct, first 20 | correct, last 20 | held-out start | held-out end |",
          "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for v, r in result["variants"].items():
        md.append(f"| {v} | {r['rejected']} | {r['non_finite']} | {r['staleness_max']:.0f} | {r['dropped_stale']} "
                  f"| {r['groups_dropped_stale']} | {r['mixed_version_completions']} | {r['correct_first']:.3f} "
                  f"| {r['correct_last']:.3f} | {r['held_out_start']:.3f} | {r['held_out_end']:.3f} |")
    md += ["", "Held-out greedy pass@1 at the end, mean of the four nodes, by seed:", "",
           "| variant | " + " | ".join(f"seed {s}" for s in args.seeds) + " |", "|---|" + "---:|" * len(args.seeds)]
    for v, r in result["variants"].items():
        md.append(f"| {v} | " + " | ".join(f"{r['held_out_end_by_seed'][s]:.3f}" for s in args.seeds) + " |")
    plot_mean_curves(curves, args.out / f"exp_async_swarm{tag}.png", "correctness (mean of 4 nodes)")
    write_experiment_report(args.out, f"exp_async_swarm{tag}", md, result, "correctness per variant")


if __name__ == "__main__":
    main()
