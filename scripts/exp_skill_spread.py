"""The skill-spread study: does a skill one node holds reach the nodes that lack it sooner by sharing?

    python scripts/exp_skill_spread.py                              # 2 nodes, 3 seeds, 150 steps, every arm
    python scripts/exp_skill_spread.py --nodes 4 --tag 4nodes       # two holders of each family
    python scripts/exp_skill_spread.py --arms isolated corrected --seeds 0 --steps 10 --eval-every 5 \\
        --sft-steps 40 --tag smoke --out /tmp/skill_smoke           # a smoke run

The embedded default model learns two task families at level 2 (counting and boolean; the others
stay near 0 however long its supervised warm start). Node k starts from a warm start on family
k mod 2 only (the default recipe with ``sft_families`` that family, level 2, ``--sft-steps`` steps;
one tokenizer for all, built once under ``--runs``), so each holds a skill the other lacks. Every
run is ``swarm-node sim --transport memory --nodes N`` (node k's model by a ``[[node]]`` flag),
trained on both families at level 2, each node evaluated every ``--eval-every`` steps (and before
the first) on 32 held-out tasks a family, greedy pass@1. Arms, the same nodes and seeds otherwise,
each generating I = 4 groups of its own a step:

- ``isolated``: 4 prompts a step, none from peers (``swarm.external_groups 0``); the nodes still
  run side by side in one swarm, so they share the machine and the rounds as the sharing arms do;
- ``naive``: 4 own + 4 peer groups a step, peers' rollouts taken as on-policy
  (``learner.off_policy_correction false``);
- ``corrected``: 4 + 4, off-policy-corrected (the defaults);
- ``selection``: corrected, taking informative peer groups first and replacing its own
  all-equal groups (``swarm.select informative``, ``swarm.replace_uninformative``);
- ``floor``: corrected, with a least weight of 0.25 on peers' rows this node scored right
  (``learner.external_success_floor 0.25``).

With two nodes a node's one peer may supply all J groups (``swarm.max_sender_share 1``).
Measured, per arm: for each node and family it lacks, the first evaluated step at which its
held-out score reaches half the level the family's holders reach alone (their mean last
evaluation in the isolated arm of the same seed: one bar for every arm; a node already there before
training is left out, as nothing had to spread to it); the speed-up over the same nodes alone (the
target: 2x or more); the last held-out scores of holders and non-holders;
collapsed nodes (own family ending below half its start). ``--hivemind-check`` adds one
``corrected`` run over hivemind (seed 0). Writes ``exp_skill_spread[-TAG].md``/``.json``/``.png``
into ``--out`` and keeps every run folder under ``--runs``.
"""

from __future__ import annotations

import argparse
import json
from dataclasses import replace
from pathlib import Path
from statistics import mean

from common import ROOT
from common.processes import run_cli
from common.report import command_line, write_experiment_report
from skill_spread.analysis import (FAMILIES, bars, family_curve, held_family, mean_reach, node_rows, plot_spread,
                                   reaches, speedup)

from swarm_node.node.observe.held_out import evaluations  # importable: common puts the repo root on sys.path
from swarm_node.node.observe.metrics import read_metrics

LEVEL = 2
EVAL_TASKS = 32  # held-out tasks a family; the warm starts leave out the same questions
OWN, PEER = 4, 4  # I and J of a sharing node; an isolated node generates the same I
ARMS = {
    "isolated": [],
    "naive": ["--learner.off_policy_correction", "false"],
    "corrected": [],
    "selection": ["--swarm.select", "informative", "--swarm.replace_uninformative", "true"],
    "floor": ["--learner.external_success_floor", "0.25"],
}


def warm_starts(args) -> Path:
    """Build each family's warm start once; a faults file giving node k family k mod 2's."""
    from swarm_node.policies.default_model import DefaultModelRecipe, build_default_model

    models = args.runs / "models"
    for family in FAMILIES:
        path = models / f"{family}-sft{args.sft_steps}"
        if not (path / "config.json").exists():
            print(f"building the {family} warm start ({args.sft_steps} steps)", flush=True)
            build_default_model(path, replace(DefaultModelRecipe(), sft_families=(family,), sft_difficulties=(LEVEL,),
                                              sft_steps=args.sft_steps, held_out_tasks=EVAL_TASKS))
    faults = models / f"faults-n{args.nodes}-sft{args.sft_steps}.toml"
    faults.write_text("\n".join(f'[[node]]\nindex = {k}\nflags = {{ "model.name" = '
                                f'"{models / f"{held_family(k)}-sft{args.sft_steps}"}" }}\n'
                                for k in range(args.nodes)))
    return faults


def run_one(args, arm: str, seed: int, faults: Path, transport: str = "memory") -> list[list[dict]]:
    """Run one arm and seed (unless done already); each node's held-out evaluations."""
    split = (["--generation.prompts_per_step", str(OWN), "--swarm.external_groups", "0"] if arm == "isolated" else
             ["--generation.prompts_per_step", str(OWN + PEER), "--swarm.external_groups", str(PEER),
              *(["--swarm.max_sender_share", "1"] if args.nodes == 2 else [])])
    cmd = ["sim", "--nodes", str(args.nodes), "--transport", transport, "--faults", str(faults),
           "--train.steps", str(args.steps), "--train.seed", str(seed * 100),
           "--swarm.round_seconds", str(args.round_seconds), "--run.progress", "plain",
           "--tasks.families", json.dumps(list(FAMILIES)), "--tasks.difficulties", f"[{LEVEL}]",
           "--eval.every", str(args.eval_every), "--eval.tasks_per_family", str(EVAL_TASKS), "--eval.at_start", "true",
           *split, *ARMS[arm]]
    name = f"{arm}-s{seed}" if transport == "memory" else f"{arm}-{transport}-s{seed}"
    run_dir = run_cli(cmd, args.runs / (args.tag or "study") / name, "summary.json", args.rerun)
    return [evaluations(read_metrics(run_dir / f"node{k}" / "metrics.jsonl"), run_dir / f"node{k}")
            for k in range(args.nodes)]


def summarise(runs: dict[int, list[list[dict]]], isolated: dict[int, list[list[dict]]], horizon: int) -> dict:
    """An arm's numbers over its seeds (``runs``: seed -> its run), against the isolated arm's."""
    per_seed = []
    for seed, run in runs.items():
        bar = bars(isolated[seed])
        rows, alone = node_rows(run, bar), node_rows(isolated[seed], bar)
        per_seed.append({"seed": seed, "bar": bar, "reach": reaches(rows), "alone_reach": reaches(alone),
                         "speedup": speedup(reaches(alone), reaches(rows), horizon), "nodes": rows})
    every = [r for p in per_seed for r in p["nodes"]]
    reach, alone = [x for p in per_seed for x in p["reach"]], [x for p in per_seed for x in p["alone_reach"]]
    return {
        "per_seed": per_seed,
        "mean_reach": mean_reach(reach, horizon), "reached": sum(r is not None for r in reach), "pairs": len(reach),
        "speedup": speedup(alone, reach, horizon),
        "holder_start": {f: mean(r["own_start"] for r in every if r["holds"] == f) for f in FAMILIES},
        "holder_final": {f: mean(r["own_final"] for r in every if r["holds"] == f) for f in FAMILIES},
        "nonholder_start": {f: mean(r["lacks"][f]["start"] for r in every if f in r["lacks"]) for f in FAMILIES},
        "nonholder_final": {f: mean(r["lacks"][f]["final"] for r in every if f in r["lacks"]) for f in FAMILIES},
        "collapsed": sum(r["collapsed"] for r in every), "nodes": len(every),
        "at_start": {f: sum(r["lacks"][f]["there_at_start"] for r in every if f in r["lacks"]) for f in FAMILIES},
    }


def row(label: str, r: dict, isolated: bool) -> str:
    s = r["speedup"]
    speed = "-" if isolated else ("n/a" if s is None else f"{s:.2f}x")
    met = "-" if isolated or s is None else ("yes" if s >= 2 else "no")
    reach = "-" if r["mean_reach"] is None else f"{r['mean_reach']:.1f}"
    return (f"| {label} | {reach} | {r['reached']}/{r['pairs']} | {speed} | {met} | "
            + " | ".join(f"{r['nonholder_final'][f]:.3f}" for f in FAMILIES) + " | "
            + " | ".join(f"{r['holder_final'][f]:.3f}" for f in FAMILIES) + f" | {r['collapsed']}/{r['nodes']} |")


def report(args, result: dict) -> list[str]:
    iso, bar = result["arms"]["isolated"], result["bar"]
    fams = " | ".join(FAMILIES)
    md = [f"# Skill spread: {args.nodes} nodes, each warm-started on one family (level {LEVEL})", "",
          f"`{command_line()}`", "",
          f"{args.steps} steps per run, seeds {args.seeds}, `swarm-node sim --transport memory`, rounds of "
          f"{args.round_seconds} s. Node k starts from a warm start on {' or '.join(FAMILIES)} only (k mod 2; "
          f"{args.sft_steps} supervised steps at level {LEVEL}) and trains on both families at level {LEVEL}: "
          f"{OWN} own groups a step, plus {PEER} from its peers in the sharing arms. Held-out: greedy pass@1 on "
          + ", ".join(f"{n} {f}" for f, n in result["eval_tasks"].items())
          + f" tasks (of {EVAL_TASKS} asked a family: a level with few questions keeps most for training), every "
          f"{args.eval_every} steps and before the first.", "",
          "Warm starts (the isolated arm before step 1, mean over seeds): holders on their own family "
          + ", ".join(f"{f} {iso['holder_start'][f]:.3f}" for f in FAMILIES) + "; non-holders on the family they lack "
          + ", ".join(f"{f} {iso['nonholder_start'][f]:.3f}" for f in FAMILIES) + ". Alone, the holders end at "
          + ", ".join(f"{f} {iso['holder_final'][f]:.3f}" for f in FAMILIES) + "; the bar (half that, per seed; "
          "mean over seeds) is " + ", ".join(f"{f} {bar[f]:.3f}" for f in FAMILIES) + ".", "",
          f"| arm | steps to the bar (mean) | got there | speed-up vs isolated | ≥ 2x | non-holders last: {fams} "
          f"| holders last: {fams} | collapsed |",
          "|---|---:|---:|---:|---|" + "---:|" * (2 * len(FAMILIES)) + "---:|"]
    md += [row(arm, r, arm == "isolated") for arm, r in result["arms"].items()]
    if result.get("hivemind"):
        md.append(row("corrected over hivemind (seed 0)", result["hivemind"], False))
    left_out = ", ".join(f"{n} on {f}" for f, n in iso["at_start"].items() if n)
    md += ["", "Steps to the bar: per non-holder and family it lacks, the first evaluated step whose held-out "
               "score is at least half the holders' last score alone (the isolated arm, same seed); a node that "
               "never got there counts as the whole run, so a speed-up with misses is a bound. "
               + (f"Non-holders already at the bar before training are left out ({left_out} of "
                  f"{len(args.seeds) * args.nodes // len(FAMILIES)} a family): nothing had to spread to them. "
                  if left_out else "") + "Speed-up: the "
               "isolated arm's mean steps over the arm's (the target: the skill spreads 2x sooner or more). "
               f"Collapsed: a node whose held-out score on its own family ended below half its start. With "
               f"{args.nodes} nodes, {'one peer supplies all J groups (swarm.max_sender_share 1)' if args.nodes == 2 else 'at most half of J comes from one peer'}."]
    return md


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--arms", nargs="+", default=list(ARMS), choices=list(ARMS))
    ap.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2])
    ap.add_argument("--nodes", type=int, default=2, help="an even number: node k holds family k mod 2")
    ap.add_argument("--steps", type=int, default=150)
    ap.add_argument("--eval-every", type=int, default=20)
    ap.add_argument("--sft-steps", type=int, default=300, help="supervised steps of each family's warm start")
    ap.add_argument("--round-seconds", type=float, default=1.2)
    ap.add_argument("--hivemind-check", action="store_true", help="also the corrected arm over hivemind (seed 0)")
    ap.add_argument("--runs", type=Path, default=ROOT / "runs" / "exp_skill_spread")
    ap.add_argument("--out", type=Path, default=ROOT / "docs" / "results")
    ap.add_argument("--tag", default="", help="suffix of the report's names, and the folder of its runs under --runs")
    ap.add_argument("--rerun", action="store_true")
    args = ap.parse_args()
    if "isolated" not in args.arms:
        ap.error("the isolated arm sets the bar and the baseline; include it")
    if args.nodes < 2 or args.nodes % 2:
        ap.error("--nodes must be even (node k holds family k mod 2)")
    args.runs.mkdir(parents=True, exist_ok=True)
    faults = warm_starts(args)

    runs = {arm: {seed: run_one(args, arm, seed, faults) for seed in args.seeds} for arm in args.arms}
    result = {"args": {k: str(v) for k, v in vars(args).items()},
              "arms": {arm: summarise(runs[arm], runs["isolated"], args.steps) for arm in args.arms}}
    result["bar"] = {f: mean(p["bar"][f] for p in result["arms"]["isolated"]["per_seed"]) for f in FAMILIES}
    first = runs["isolated"][args.seeds[0]][0][0]["families"]  # node0's first evaluation: tasks per family
    result["eval_tasks"] = {f: first[f]["n"] for f in FAMILIES}
    if args.hivemind_check:
        result["hivemind"] = summarise({0: run_one(args, "corrected", 0, faults, "hivemind")},
                                       {0: run_one(args, "isolated", 0, faults)}, args.steps)
    tag = f"-{args.tag}" if args.tag else ""
    curves = {f: {arm: [family_curve(evals, f) for run in by_seed.values() for k, evals in enumerate(run)
                        if held_family(k) != f] for arm, by_seed in runs.items()} for f in FAMILIES}
    plot_spread(curves, result["bar"], args.out / f"exp_skill_spread{tag}.png",
                f"Skill spread: {args.nodes} nodes, mean over nodes and seeds")
    write_experiment_report(args.out, f"exp_skill_spread{tag}", report(args, result), result,
                            "held-out score of the non-holders per arm")


if __name__ == "__main__":
    main()
