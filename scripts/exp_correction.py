"""The correction study: a swarm with stale and heterogeneous peers, trained four ways.

    python scripts/exp_correction.py                         # 4 nodes, 3 seeds, 150 steps
    python scripts/exp_correction.py --seeds 0 --steps 40 --tag quick

The swarm (``swarm-node sim --nodes 4 --faults``, hivemind on loopback): node0 and node1 are
ordinary; node2 is stale (it generates with a policy ``--lag`` updates old); node3 is
heterogeneous (another model: a default-recipe variant with a different width and vocabulary,
so another tokenizer, built once under ``--runs``). Every node trains 4 local + 4 peer groups per
step. Variants, the same swarm and seeds otherwise:

- ``naive``: peers' rollouts treated as on-policy (``learner.off_policy_correction false``), as
  rl-swarm does: no importance ratios, ESS = B;
- ``corrected``: off-policy-corrected GRPO without the ESS learning-rate rule (``lr_rule none``);
- ``corrected_ess``: off-policy-corrected GRPO with the ESS learning-rate rule (``lr_rule sqrt``);
- ``corrected_ess_floor``: ``corrected_ess`` with a least weight of 0.25 on peers' rows this node
  scored right (``learner.external_success_floor 0.25``, docs/algorithm.md section 10): the
  remedy that lets peers' successes teach must not cost the stability the correction buys.

Reported for the ordinary nodes (node0, node1: they learn from the stale and heterogeneous
peers): final correctness (last 20 steps; mean and spread over seeds), the worst dip (the largest
fall of the 20-step rolling mean below its running peak: a collapse shows as a large dip), and
mean ESS/B (the one the learner used, 1 for naive, and the batches' true one). Writes ``exp_correction[-TAG].md``/``.json``/``.png`` into ``--out``.
"""

from __future__ import annotations

import argparse
import statistics
from dataclasses import replace
from pathlib import Path

from common import ROOT
from common.curves import WINDOW, correctness, final, plot_mean_curves, worst_dip
from common.processes import run_cli
from common.report import command_line, write_experiment_report

from swarm_node.node.observe.metrics import read_metrics  # importable: common puts the repo root on sys.path

VARIANTS = {
    "naive": ["--learner.off_policy_correction", "false", "--learner.lr_rule", "none"],
    "corrected": ["--learner.lr_rule", "none"],
    "corrected_ess": ["--learner.lr_rule", "sqrt"],
    "corrected_ess_floor": ["--learner.lr_rule", "sqrt", "--learner.external_success_floor", "0.25"],
}
ORDINARY = (0, 1)
ROLES = {"ordinary (node0, node1)": ORDINARY, "stale (node2)": (2,), "heterogeneous (node3)": (3,)}


def other_model(runs: Path) -> Path:
    """A heterogeneous peer's model: the default recipe, narrower and with another vocabulary."""
    from swarm_node.policies.default_model import DefaultModelRecipe, build_default_model

    path = runs / "heterogeneous-model"
    if not (path / "config.json").exists():
        build_default_model(path, replace(DefaultModelRecipe(), hidden_size=128, vocab_size=352))
    return path


def run_one(args, variant: str, seed: int, model: Path) -> Path:
    faults = args.runs / "faults.toml"
    faults.write_text(f'[[node]]\nindex = 2\nflags = {{ "train.behaviour_lag" = {args.lag} }}\n\n'
                      f'[[node]]\nindex = 3\nflags = {{ "model.name" = "{model}" }}\n')
    return run_cli(["sim", "--nodes", "4", "--transport", "hivemind", "--faults", str(faults),
                    "--train.steps", str(args.steps), "--train.seed", str(seed * 100),
                    "--swarm.round_seconds", str(args.round_seconds), "--run.progress", "plain",
                    *VARIANTS[variant]], args.runs / f"{variant}-s{seed}", "summary.json", args.rerun)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2])
    ap.add_argument("--steps", type=int, default=150)
    ap.add_argument("--lag", type=int, default=8, help="the stale node's behaviour lag (updates)")
    ap.add_argument("--round-seconds", type=float, default=1.2)
    ap.add_argument("--variants", nargs="+", default=list(VARIANTS), choices=list(VARIANTS))
    ap.add_argument("--runs", type=Path, default=ROOT / "runs" / "exp_correction")
    ap.add_argument("--out", type=Path, default=ROOT / "docs" / "results")
    ap.add_argument("--tag", default="")
    ap.add_argument("--rerun", action="store_true")
    args = ap.parse_args()
    args.runs.mkdir(parents=True, exist_ok=True)
    model = other_model(args.runs)

    result: dict = {"args": {k: str(v) for k, v in vars(args).items()}, "variants": {}}
    curves = {}
    for v in args.variants:
        per_seed, by_role = [], {role: [] for role in ROLES}
        for seed in args.seeds:
            run_dir = run_one(args, v, seed, model)
            every = [read_metrics(run_dir / f"node{i}" / "metrics.jsonl") for i in range(4)]
            for role, idx in ROLES.items():
                by_role[role] += [final(correctness(every[i])) for i in idx]
            recs = [every[i] for i in ORDINARY]
            cs = [correctness(rr) for rr in recs]
            curves.setdefault(v, []).extend(cs)
            per_seed.append({
                "start": statistics.mean(statistics.mean(c[:WINDOW]) for c in cs),
                "final": statistics.mean(final(c) for c in cs),
                # a node that ends below where it started (first 20 steps) has collapsed
                "collapsed": sum(final(c) < statistics.mean(c[:WINDOW]) for c in cs),
                "dip": max(worst_dip(c) for c in cs),
                "rho": statistics.mean(r.get("rho") or 1.0 for rr in recs for r in rr),
                # the batch's real ESS/B against its behaviour policies (naive sharing ignores it)
                "behaviour_rho": statistics.mean(r.get("behaviour_rho", r.get("rho")) or 1.0
                                                 for rr in recs for r in rr),
            })
        result["variants"][v] = {"per_seed": per_seed,
                                 **{k: statistics.mean(p[k] for p in per_seed)
                                    for k in ("start", "final", "dip", "rho", "behaviour_rho")},
                                 "collapsed": sum(p["collapsed"] for p in per_seed),
                                 "final_sd": statistics.pstdev(p["final"] for p in per_seed),
                                 "final_by_role": {role: statistics.mean(f) for role, f in by_role.items()}}
    tag = f"-{args.tag}" if args.tag else ""
    md = ["# Correction study: stale and heterogeneous peers", "",
          f"`{command_line()}`", "",
          f"4 nodes over hivemind on loopback, {args.steps} steps, seeds {args.seeds}: node2 stale "
          f"(behaviour lag {args.lag}), node3 heterogeneous (another width and tokenizer). Each step 4 "
          "local + 4 peer groups. Numbers for the ordinary nodes (node0, node1), means over seeds.", "",
          "| variant | first 20 steps | final correctness (last 20) | spread over seeds (sd) | nodes that ended below their start "
          "| worst dip of the 20-step mean | ESS/B the learner used | true ESS/B of the batches |",
          "|---|---:|---:|---:|---:|---:|---:|---:|"]
    n_ordinary = len(ORDINARY) * len(args.seeds)
    for v, r in result["variants"].items():
        md.append(f"| {v} | {r['start']:.3f} | {r['final']:.3f} | {r['final_sd']:.3f} | {r['collapsed']}/{n_ordinary} "
                  f"| {r['dip']:.3f} | {r['rho']:.3f} | {r['behaviour_rho']:.3f} |")
    md += ["", "Final correctness (last 20 steps) by node, means over seeds:", "",
           "| variant | " + " | ".join(ROLES) + " |", "|---|" + "---:|" * len(ROLES)]
    for v, r in result["variants"].items():
        md.append(f"| {v} | " + " | ".join(f"{r['final_by_role'][role]:.3f}" for role in ROLES) + " |")
    plot_mean_curves(curves, args.out / f"exp_correction{tag}.png", "correctness of node0/node1")
    write_experiment_report(args.out, f"exp_correction{tag}", md, result, "correctness per variant")


if __name__ == "__main__":
    main()
