"""SAPO's split study on the embedded task: local/external = 8/0, 6/2, 4/4, 2/6 at the same budget.

    python scripts/exp_sapo_splits.py                               # 4 nodes, 3 seeds, 200 steps
    python scripts/exp_sapo_splits.py --splits 8/0 4/4 --seeds 0 --steps 60 --tag quick
    python scripts/exp_sapo_splits.py --transport hivemind --distinct-models --tag distinct

Every run is ``swarm-node sim --nodes N`` on the embedded default model (level-1 tasks). Each
step a node trains on 8 groups of 8 completions: I it generated, J from its peers (I + J = 8,
so every split costs the same generation and learning per step; 8/0 shares nothing and is the
isolated baseline, run as a swarm so that it shares the machine the same way). With
``--distinct-models`` node i starts from its own warm start (the default recipe with seed
1234 + i) instead of all from the same weights. Per run and node:
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
import statistics
from dataclasses import replace
from pathlib import Path

from common import ROOT
from common.curves import correctness, final, first_reach, plot_mean_curves
from common.processes import run_cli
from common.report import command_line, write_experiment_report

from node.observe.metrics import read_metrics  # importable: common puts the repo root on sys.path


def distinct_models(args) -> Path:
    """A faults file giving node i its own warm start: the default recipe with seed 1234 + i."""
    from policies.default_model import DefaultModelRecipe, build_default_model

    lines = []
    for i in range(args.nodes):
        recipe = replace(DefaultModelRecipe(), seed=DefaultModelRecipe().seed + i)
        path = args.runs / "models" / f"node{i}"
        if not (path / "config.json").exists():
            build_default_model(path, recipe)
        lines.append(f'[[node]]\nindex = {i}\nflags = {{ "model.name" = "{path}" }}\n')
    faults = args.runs / "models" / "faults.toml"
    faults.write_text("\n".join(lines))
    return faults


def run_one(args, split: str, seed: int, faults: Path | None) -> Path:
    local, external = (int(x) for x in split.split("/"))
    cmd = ["sim", "--nodes", str(args.nodes), "--transport", args.transport,
           "--train.steps", str(args.steps), "--train.seed", str(seed * 100),
           "--generation.prompts_per_step", str(local + external), "--swarm.external_groups", str(external),
           "--swarm.round_seconds", str(args.round_seconds), "--run.progress", "plain"]
    if faults is not None:
        cmd += ["--faults", str(faults)]
    return run_cli(cmd, args.runs / f"{split.replace('/', '-')}-s{seed}", "summary.json", args.rerun)


def node_curves(run_dir: Path, nodes: int) -> list[list[float]]:
    return [correctness(read_metrics(run_dir / f"node{i}" / "metrics.jsonl")) for i in range(nodes)]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--splits", nargs="+", default=["8/0", "6/2", "4/4", "2/6"])
    ap.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2])
    ap.add_argument("--nodes", type=int, default=4)
    ap.add_argument("--steps", type=int, default=200)
    ap.add_argument("--round-seconds", type=float, default=1.2, help="above one step's compute with all nodes on the machine")
    ap.add_argument("--transport", default="memory", choices=["memory", "hivemind"])
    ap.add_argument("--distinct-models", action="store_true",
                    help="give node i its own warm start (seed 1234 + i; needs --transport hivemind)")
    ap.add_argument("--runs", type=Path, default=ROOT / "runs" / "exp_sapo_splits")
    ap.add_argument("--out", type=Path, default=ROOT / "docs" / "results")
    ap.add_argument("--tag", default="")
    ap.add_argument("--rerun", action="store_true")
    args = ap.parse_args()
    if "8/0" not in args.splits:
        ap.error("the 8/0 split is the baseline; include it")
    if args.distinct_models and args.transport != "hivemind":
        ap.error("--distinct-models gives each node its own model through a faults file: use --transport hivemind")
    args.runs.mkdir(parents=True, exist_ok=True)
    faults = distinct_models(args) if args.distinct_models else None

    curves = {s: {seed: node_curves(run_one(args, s, seed, faults), args.nodes) for seed in args.seeds} for s in args.splits}
    result = {"args": {k: str(v) for k, v in vars(args).items()}, "splits": {}}
    for s in args.splits:
        per_seed = []
        for seed in args.seeds:
            base_final = statistics.mean(final(c) for c in curves["8/0"][seed])
            nodes = curves[s][seed]
            reach = [first_reach(c, base_final) for c in nodes]
            per_seed.append({
                "cumulative": statistics.mean(sum(c) for c in nodes),
                "final": statistics.mean(final(c) for c in nodes),
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
          f"`{command_line()}`", "",
          f"{args.steps} steps per run, seeds {args.seeds}, transport {args.transport}, rounds of "
          f"{args.round_seconds} s. Each step a node trains on 8 groups of 8 completions: I its own, J its peers'. "
          + ("Every node starts from its own warm start (the default recipe with seed 1234 + i). "
             if args.distinct_models else "Every node starts from the same warm-started model. ")
          + "Correctness of each node's own completions; means over nodes and seeds (± spread over seeds).", "",
          "| local/external | cumulative correctness | vs 8/0 | final (last 20 steps) | vs 8/0 "
          "| steps to 8/0's final (fraction of run) | nodes that got there | steps vs 8/0 | own rollouts generated vs 8/0 |",
          "|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for s, r in result["splits"].items():
        local = int(s.split("/")[0])
        steps_vs = r["reach_frac"] / base["reach_frac"]
        reached = sum(p["reached"] for p in r["per_seed"])
        md.append(f"| {s} | {r['cumulative']:.1f} ± {r['cumulative_sd']:.1f} | {r['cumulative'] / base['cumulative']:.2f}x | "
                  f"{r['final']:.3f} ± {r['final_sd']:.3f} | {r['final'] / base['final']:.2f}x | {r['reach_frac']:.2f} | "
                  f"{reached}/{args.nodes * len(args.seeds)} | {steps_vs:.2f}x | {steps_vs * local / 8:.2f}x |")
    md += ["", "Steps to 8/0's final: per node, the first step whose 20-step rolling mean reaches the 8/0 "
               "final correctness of the same seed (1.00 = never within the run); 8/0 itself reaches its "
               "own final by definition late in the run. \"Steps vs 8/0\" divides the two fractions (the "
               "issue's target is 0.6x or less); a node that never got there counts as the whole run (an "
               "underestimate, which favours the splits where fewer nodes got there). \"Own rollouts "
               "generated\" multiplies it by I / 8: a sharing node generates I groups a step instead of "
               "8. SAPO reported 562 / 854 / 1093 / 946 cumulative reward for 8/0 / 6/2 / 4/4 / 2/6 on "
               "its task and models."]
    plot_mean_curves({f"{s} (local/external)": [c for nodes in by_seed.values() for c in nodes]
                      for s, by_seed in curves.items()},
                     args.out / f"exp_sapo_splits{tag}.png", "correctness",
                     f"SAPO splits: {args.nodes} nodes, mean over nodes and seeds")
    write_experiment_report(args.out, f"exp_sapo_splits{tag}", md, result, "correctness per split")


if __name__ == "__main__":
    main()
