"""SAPO's split study on the embedded task: local/external = 8/0, 6/2, 4/4, 2/6 at the same budget.

    python scripts/exp_sapo_splits.py                               # 4 nodes, 3 seeds, 200 steps
    python scripts/exp_sapo_splits.py --splits 8/0 4/4 --seeds 0 --steps 60 --tag quick
    python scripts/exp_sapo_splits.py --transport hivemind --distinct-models --tag distinct
    python scripts/exp_sapo_splits.py --splits 8/0 4/4 4/4+naive 4/4+floor ...   # diagnostic arms
    python scripts/exp_sapo_splits.py --metric held-out --select informative --replace-uninformative \\
        --tasks counting --levels 2 --learning-rate 1e-4 --round-seconds 1.5 \\
        --runs runs/exp_sapo_splits_heldout --tag held-out

Every run is ``swarm-node sim --nodes N`` on the embedded default model (level-1 tasks unless
``--tasks``/``--levels`` choose others: the model generalises to held-out questions only on level-2
counting, docs/measurements.md "Choosing the demo's task", so study the held-out metric there). Each
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

``--metric held-out`` measures the reach on held-out questions instead (issue 25): every node
evaluates every ``--eval-every`` steps, before the first and after the last, on ``--eval-tasks``
held-out tasks a family; the bar is the 8/0 nodes' mean last held-out score (greedy pass@1) of
the same seed, and a node's reach is the first evaluated step at or above it: no rolling mean, the
evaluations are sparse already, so a reach is known to within ``--eval-every`` steps. The report
adds each split's held-out start and final. ``--select`` and ``--replace-uninformative`` set
``swarm.select`` and ``swarm.replace_uninformative`` on every arm, 8/0 too (with J = 0 the
replace only drops a node's all-equal groups: the same filter on the baseline's own groups).

Rounds: ``--round-seconds`` must exceed one step's compute with every node on the machine; over
memory all nodes run in one process. One node, level-2 counting (``swarm-node train``, one thread,
the CPU time of 12 steps less 2, and of 2 steps with and without two evaluations): 0.46 CPU-s a
step of 8 groups, 1.5 CPU-s an evaluation of 64 held-out tasks (greedy and 4 samples each), so
0.54 s a step with an evaluation every 20 steps. On 2 cores that makes at least 1.1 s a round for 4
nodes and 2.2 s for 8 (if both cores were theirs alone): ``--round-seconds 1.5`` at 4 nodes and
``3`` at 8 leave about a third spare. The step at which every node evaluates takes a few rounds.
An arm ``I/J+VARIANT`` is the split with one learner change (``VARIANTS``): ``naive`` trains on
peers' rollouts as if on-policy (no importance ratios, no ESS learning rate), ``floor`` lifts
peers' verified successes to a weight of at least 0.25: what the correction costs or gives a
sharing node, side by side with the same split corrected. A run keeps its folder per split, seed
and the settings above; a study at another ``--nodes`` or
``--steps`` needs its own ``--runs``.

Writes ``exp_sapo_splits[-TAG].md``/``.json``/``.png`` into ``--out`` (docs/results) and keeps
every run folder under ``--runs``.
"""

from __future__ import annotations

import argparse
import json
import statistics
from dataclasses import replace
from pathlib import Path

from common import ROOT
from common.curves import Curve, correctness, final, first_reach, first_reach_at, held_out_curve, plot_mean_curves
from common.processes import run_cli
from common.report import command_line, write_experiment_report

from swarm_node.node.observe.held_out import evaluations  # importable: common puts the repo root on sys.path
from swarm_node.node.observe.metrics import read_metrics
from swarm_node.node.config.config import TasksConfig
from swarm_node.rewards.registry import all_families


def distinct_models(args) -> Path:
    """A faults file giving node i its own warm start: the default recipe with seed 1234 + i."""
    from swarm_node.policies.default_model import DefaultModelRecipe, build_default_model

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


def run_name(args, split: str, seed: int) -> str:
    """A run's folder: its split and seed, then each setting of this study that differs from the
    first study's (whose runs keep their names)."""
    parts = [split.replace("/", "-"), f"s{seed}"]
    if args.metric == "held-out":
        parts.append(f"eval{args.eval_every}x{args.eval_tasks}")
    if args.select != "fresh":
        parts.append(args.select)
    if args.replace_uninformative:
        parts.append("replace")
    if args.tasks:
        parts.append("+".join(args.tasks))
    if args.levels:
        parts.append("L" + "+".join(map(str, args.levels)))
    if args.learning_rate is not None:
        parts.append(f"lr{args.learning_rate:g}")
    return "-".join(parts)


def study_flags(args) -> list[str]:
    """The flags every arm gets alike: selection, tasks, learning rate, held-out evaluation."""
    flags = ["--swarm.select", args.select, "--swarm.replace_uninformative", str(args.replace_uninformative).lower()]
    if args.nodes == 2:  # a node's one peer may supply all J groups (else at most half of them)
        flags += ["--swarm.max_sender_share", "1"]
    if args.tasks:
        flags += ["--tasks.families", json.dumps(args.tasks)]
    if args.levels:
        flags += ["--tasks.difficulties", json.dumps(args.levels)]
    if args.learning_rate is not None:
        flags += ["--learner.learning_rate", str(args.learning_rate)]
    if args.metric == "held-out":
        flags += ["--eval.every", str(args.eval_every), "--eval.tasks_per_family", str(args.eval_tasks),
                  "--eval.at_start", "true"]
    return flags


# An arm may add a learner variant to its split ("4/4+naive"): what the diagnostic arms change.
VARIANTS = {
    # peers' rollouts treated as on-policy, as rl-swarm does (exp_correction.py's naive)
    "naive": ["--learner.off_policy_correction", "false", "--learner.lr_rule", "none"],
    # a least weight of 0.25 on peers' rows this node scored right (docs/algorithm.md section 10)
    "floor": ["--learner.external_success_floor", "0.25"],
}


def parse_split(split: str) -> tuple[int, int, str | None]:
    """``"4/4"`` -> (4, 4, None); ``"4/4+naive"`` -> (4, 4, "naive"). I + J must be 8."""
    body, _, variant = split.partition("+")
    try:
        local, external = (int(x) for x in body.split("/"))
    except ValueError:
        raise ValueError(f"split {split!r}: write LOCAL/EXTERNAL, e.g. 4/4 (or 4/4+naive)") from None
    if local < 0 or external < 0 or local + external != 8:
        raise ValueError(f"split {split!r}: local + external must be 8 (the same budget as 8/0)")
    if variant and variant not in VARIANTS:
        raise ValueError(f"split {split!r}: unknown variant {variant!r}; choose from {', '.join(VARIANTS)}")
    return local, external, variant or None


def run_one(args, split: str, seed: int, faults: Path | None) -> Path:
    local, external, variant = parse_split(split)
    cmd = ["sim", "--nodes", str(args.nodes), "--transport", args.transport,
           "--train.steps", str(args.steps), "--train.seed", str(seed * 100),
           "--generation.prompts_per_step", str(local + external), "--swarm.external_groups", str(external),
           "--swarm.round_seconds", str(args.round_seconds), "--run.progress", "plain", *study_flags(args),
           *VARIANTS.get(variant, [])]
    if faults is not None:
        cmd += ["--faults", str(faults)]
    return run_cli(cmd, args.runs / run_name(args, split, seed), "summary.json", args.rerun)


def node_curves(run_dir: Path, nodes: int) -> list[list[float]]:
    return [correctness(read_metrics(run_dir / f"node{i}" / "metrics.jsonl")) for i in range(nodes)]


def node_evaluations(run_dir: Path, nodes: int) -> list[list[dict]]:
    """Each node's held-out evaluations, the one before training first."""
    return [evaluations(read_metrics(run_dir / f"node{i}" / "metrics.jsonl"), run_dir / f"node{i}")
            for i in range(nodes)]


# -- the statistics (pure) ------------------------------------------------------------------------
def train_numbers(nodes: list[list[float]], base: list[list[float]], steps: int) -> dict:
    """One seed's numbers from its nodes' correctness curves, against the 8/0 nodes' (``base``)."""
    base_final = statistics.mean(final(c) for c in base)
    reach = [first_reach(c, base_final) for c in nodes]
    return {
        "cumulative": statistics.mean(sum(c) for c in nodes),
        "final": statistics.mean(final(c) for c in nodes),
        "reach_frac": statistics.mean(r / steps if r else 1.0 for r in reach),
        "reached": sum(r is not None for r in reach),
    }


def held_out_numbers(nodes: list[Curve], base: list[Curve], steps: int) -> dict:
    """One seed's held-out numbers: the bar (the 8/0 nodes' mean last score), the nodes' mean first
    and last score, and each node's reach of the bar (the first evaluated step at it or above; a
    node that never got there counts as the whole run) as a fraction of the run."""
    bar = statistics.mean(c[-1][1] for c in base)
    reach = [first_reach_at(c, bar) for c in nodes]
    return {
        "held_bar": bar,
        "held_start": statistics.mean(c[0][1] for c in nodes),
        "held_final": statistics.mean(c[-1][1] for c in nodes),
        "held_reach_frac": statistics.mean(1.0 if r is None else r / steps for r in reach),
        "held_reached": sum(r is not None for r in reach),
    }


MEANS = ("cumulative", "final", "reach_frac", "held_bar", "held_start", "held_final", "held_reach_frac")
SPREADS = ("cumulative", "final", "held_final")


def summarise(per_seed: list[dict]) -> dict:
    """A split's numbers: the mean over seeds of each, the spread over seeds of the levels."""
    return {"per_seed": per_seed,
            **{k: statistics.mean(p[k] for p in per_seed) for k in MEANS if k in per_seed[0]},
            **{f"{k}_sd": statistics.pstdev(p[k] for p in per_seed) for k in SPREADS if k in per_seed[0]}}


def steps_vs(split: dict, base: dict, key: str) -> float | None:
    """A split's reach over 8/0's (fractions of the run), or None when 8/0 was there at its first
    evaluation (nothing to divide by)."""
    return split[key] / base[key] if base[key] > 0 else None


# -- the report ------------------------------------------------------------------------------------
def tasks_words(args) -> str:
    levels = args.levels or TasksConfig().difficulties
    return f"level-{'/'.join(map(str, levels))} " + (f"{' + '.join(args.tasks)} " if args.tasks else "") + "tasks"


def selection_words(args) -> str:
    if args.select == "fresh" and not args.replace_uninformative:
        return ""
    return f", selection: swarm.select {args.select}, swarm.replace_uninformative {str(args.replace_uninformative).lower()}"


def report(args, result: dict) -> list[str]:
    held = args.metric == "held-out"
    base = result["splits"]["8/0"]
    md = [f"# SAPO split study: {args.nodes} nodes, embedded default model, {tasks_words(args)}{selection_words(args)}",
          "", f"`{command_line()}`", "",
          f"{args.steps} steps per run, seeds {args.seeds}, transport {args.transport}, rounds of "
          f"{args.round_seconds} s. Each step a node trains on 8 groups of 8 completions: I its own, J its peers'. "
          + ("Every node starts from its own warm start (the default recipe with seed 1234 + i). "
             if args.distinct_models else "Every node starts from the same warm-started model. ")
          + (f"Learning rate {args.learning_rate:g}. " if args.learning_rate is not None else "")
          + (f"Every arm, 8/0 included, takes peer groups by swarm.select {args.select}"
             + (" and leaves out its own all-equal groups (swarm.replace_uninformative: replaced by peer groups "
                "when the pool has them, only dropped at 8/0, where J = 0)" if args.replace_uninformative else "")
             + ". " if selection_words(args) else "")
          + ("Correctness of each node's own completions; " if not held else
             f"Correctness of each node's own completions (training), and its held-out score: greedy pass@1 on "
             f"{result['eval_tasks']} held-out tasks (of {args.eval_tasks} asked a family), every {args.eval_every} "
             f"steps, before the first and after the last; {base['held_start']:.3f} before training; ")
          + "means over nodes and seeds (± spread over seeds).", ""]
    n = args.nodes * len(args.seeds)
    if held:
        md += ["| local/external | cumulative correctness | vs 8/0 | final correctness (last 20 steps) | vs 8/0 "
               "| held-out final | vs 8/0 | steps to 8/0's held-out final (fraction of run) | nodes that got there "
               "| steps vs 8/0 | own rollouts generated vs 8/0 |",
               "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    else:
        md += ["| local/external | cumulative correctness | vs 8/0 | final (last 20 steps) | vs 8/0 "
               "| steps to 8/0's final (fraction of run) | nodes that got there | steps vs 8/0 | own rollouts generated vs 8/0 |",
               "|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for s, r in result["splits"].items():
        local = parse_split(s)[0]
        reach = "held_reach_frac" if held else "reach_frac"
        vs = steps_vs(r, base, reach)
        reached = sum(p["held_reached" if held else "reached"] for p in r["per_seed"])
        cells = [s, f"{r['cumulative']:.1f} ± {r['cumulative_sd']:.1f}", f"{r['cumulative'] / base['cumulative']:.2f}x",
                 f"{r['final']:.3f} ± {r['final_sd']:.3f}", f"{r['final'] / base['final']:.2f}x"]
        if held:
            cells += [f"{r['held_final']:.3f} ± {r['held_final_sd']:.3f}",
                      f"{r['held_final'] / base['held_final']:.2f}x" if base["held_final"] else "n/a"]
        cells += [f"{r[reach]:.2f}", f"{reached}/{n}", "n/a" if vs is None else f"{vs:.2f}x",
                  "n/a" if vs is None else f"{vs * local / 8:.2f}x"]
        md.append("| " + " | ".join(cells) + " |")
    if held:
        md += ["", f"Steps to 8/0's held-out final: per node, the first evaluation whose held-out score is at least "
                   f"the 8/0 nodes' mean last held-out score of the same seed (1.00 = never within the run; at 8/0 "
                   f"the nodes that ended below their mean may never get there). No rolling mean: the evaluations "
                   f"are sparse already, so a reach is known to within {args.eval_every} steps "
                   f"({args.eval_every / args.steps:.2f} of the run). \"Steps vs 8/0\" divides the two fractions; a "
                   "node that never got there counts as the whole run (an underestimate, which favours the splits "
                   "where fewer nodes got there). \"Own rollouts generated\" multiplies it by I / 8: a sharing node "
                   "generates I groups a step instead of 8. The issue's target: with selection, 4/4 within 0.6x of "
                   "8/0's steps, with half its own generation (0.30x or less)."]
    else:
        md += ["", "Steps to 8/0's final: per node, the first step whose 20-step rolling mean reaches the 8/0 "
                   "final correctness of the same seed (1.00 = never within the run); 8/0 itself reaches its "
                   "own final by definition late in the run. \"Steps vs 8/0\" divides the two fractions (the "
                   "issue's target is 0.6x or less); a node that never got there counts as the whole run (an "
                   "underestimate, which favours the splits where fewer nodes got there). \"Own rollouts "
                   "generated\" multiplies it by I / 8: a sharing node generates I groups a step instead of "
                   "8. SAPO reported 562 / 854 / 1093 / 946 cumulative reward for 8/0 / 6/2 / 4/4 / 2/6 on "
                   "its task and models."]
    return md


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--splits", nargs="+", default=["8/0", "6/2", "4/4", "2/6"])
    ap.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2])
    ap.add_argument("--nodes", type=int, default=4)
    ap.add_argument("--steps", type=int, default=200)
    ap.add_argument("--round-seconds", type=float, default=1.2,
                    help="above one step's compute with all nodes on the machine (held-out, 2 cores: 1.5 at 4 nodes, 3 at 8)")
    ap.add_argument("--transport", default="memory", choices=["memory", "hivemind"])
    ap.add_argument("--distinct-models", action="store_true",
                    help="give node i its own warm start (seed 1234 + i; needs --transport hivemind)")
    ap.add_argument("--metric", default="correctness", choices=["correctness", "held-out"],
                    help="what the reach is measured on: each node's own training samples (20-step rolling mean) "
                         "or its held-out evaluations")
    ap.add_argument("--eval-every", type=int, default=20, help="--metric held-out: steps between evaluations")
    ap.add_argument("--eval-tasks", type=int, default=64, help="--metric held-out: held-out tasks a family")
    ap.add_argument("--select", default="fresh", choices=["fresh", "informative", "weakest"],
                    help="swarm.select of every arm: which peer groups a step takes first")
    ap.add_argument("--replace-uninformative", action="store_true",
                    help="swarm.replace_uninformative on every arm (at 8/0 it only drops the all-equal own groups)")
    ap.add_argument("--tasks", nargs="+", choices=all_families(), help="task families (default: the config's)")
    ap.add_argument("--levels", nargs="+", type=int, help="difficulty levels (default: the config's)")
    ap.add_argument("--learning-rate", type=float, help="learner.learning_rate (default: the config's)")
    ap.add_argument("--runs", type=Path, default=ROOT / "runs" / "exp_sapo_splits")
    ap.add_argument("--out", type=Path, default=ROOT / "docs" / "results")
    ap.add_argument("--tag", default="")
    ap.add_argument("--rerun", action="store_true")
    args = ap.parse_args()
    if "8/0" not in args.splits:
        ap.error("the 8/0 split is the baseline; include it")
    for split in args.splits:
        try:
            parse_split(split)
        except ValueError as e:
            ap.error(str(e))
    if args.distinct_models and args.transport != "hivemind":
        ap.error("--distinct-models gives each node its own model through a faults file: use --transport hivemind")
    args.runs.mkdir(parents=True, exist_ok=True)
    faults = distinct_models(args) if args.distinct_models else None

    dirs = {s: {seed: run_one(args, s, seed, faults) for seed in args.seeds} for s in args.splits}
    curves = {s: {seed: node_curves(d, args.nodes) for seed, d in by_seed.items()} for s, by_seed in dirs.items()}
    held = args.metric == "held-out"
    evals = ({s: {seed: node_evaluations(d, args.nodes) for seed, d in by_seed.items()} for s, by_seed in dirs.items()}
             if held else {})
    held_curves = {s: {seed: [held_out_curve(e) for e in nodes] for seed, nodes in by_seed.items()}
                   for s, by_seed in evals.items()}
    result = {"args": {k: str(v) for k, v in vars(args).items()}, "splits": {}}
    for s in args.splits:
        result["splits"][s] = summarise([
            train_numbers(curves[s][seed], curves["8/0"][seed], args.steps)
            | (held_out_numbers(held_curves[s][seed], held_curves["8/0"][seed], args.steps) if held else {})
            for seed in args.seeds])
    result["selection"] = {"select": args.select, "replace_uninformative": args.replace_uninformative}
    if held:
        result["eval_tasks"] = evals["8/0"][args.seeds[0]][0][0]["n"]  # node0's first evaluation
    tag = f"-{args.tag}" if args.tag else ""
    title = f"SAPO splits: {args.nodes} nodes, mean over nodes and seeds"
    if held:
        plot_mean_curves({f"{s} (local/external)": [c for nodes in by_seed.values() for c in nodes]
                          for s, by_seed in held_curves.items()},
                         args.out / f"exp_sapo_splits{tag}.png", "held-out pass@1 (greedy)", title, sparse=True)
    else:
        plot_mean_curves({f"{s} (local/external)": [c for nodes in by_seed.values() for c in nodes]
                          for s, by_seed in curves.items()},
                         args.out / f"exp_sapo_splits{tag}.png", "correctness", title)
    write_experiment_report(args.out, f"exp_sapo_splits{tag}", report(args, result), result,
                            "held-out score per split" if held else "correctness per split")


if __name__ == "__main__":
    main()
