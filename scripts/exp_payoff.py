"""Does joining pay? Sharing nodes against the same machine alone, with the levers that should let
more data make a bigger step (issue 37), in a dense and a sparse regime, over seeds, with intervals.

    python scripts/exp_payoff.py                                  # the study: 2 regimes, 5 seeds, 200 steps
    python scripts/exp_payoff.py --regimes dense --seeds 0 --steps 40 --eval-every 10 --tag pilot
    python scripts/exp_payoff.py --transport hivemind --regimes dense --seeds 0 --arms corrected  # confirm over hivemind

Every run is ``swarm-node sim --transport memory --nodes 4`` on the embedded default model: each
step a sharing node trains on 8 groups of 8 completions, 4 it generated (I) and 4 from its peers (J).
The arms (``ARMS``), each its own run per regime and seed, the same flags but the arm's:

- **solo**: the ``corrected`` run's ``--control C`` nodes: the same recipe alone, on the I groups a
  sharing node generates itself a step (node/sim/control.py), each its own seed;
- **corrected**: sharing, the node's defaults (importance ratios against the behaviour log-probs,
  the learning rate scaled by √(ESS/B), docs/algorithm.md);
- **count**: ``learner.lr_rule count``: the learning rate by the effective sample *count* against a
  solo step's rows, capped (``learner.lr_cap``): a step with more informative rows may go further;
- **peer_sft**: ``learner.peer_sft_coef``: a bounded supervised term on peers' verified successes
  for the kinds of question this node gets all wrong (docs/algorithm.md section 11);
- **sapo**: SAPO's own recipe (genrl): a peer's sample as the node's own (no ratios, no ESS rule)
  and advantages scaled by the group's std (``learner.scale_rewards group``).

The regimes (``REGIMES``): **dense**, level-2 counting, where the warm-started model answers about a
quarter of the held-out questions greedily (0.246 greedy, 0.103 sampled on 256); **sparse**,
level-3 counting, which the warm start never taught (0.117 greedy, 0.040 sampled: most groups all
wrong), where a peer's rare success is what SAPO should spread if anything does. Both measured at
step 0 on 256 held-out questions with 4 samples each (the embedded model of recipe ddb9dba97039).

What is measured: each node's held-out evaluation (``--eval-tasks`` questions, greedy and
``--eval-samples`` sampled completions each) before training and every ``--eval-every`` steps;
a run's curve per seed is the mean over its sharing (or control) nodes at each evaluated step, and
its **end score** the mean of its last three evaluations (node/observe/held_out.py). Comparisons
(node/observe/paired.py): arm − solo, and each lever − corrected, the difference per seed at equal
steps, at equal own generation (a sharing node's step costs I groups of generation, a solo node's
too) and at equal wall-clock, with a Student t 95% confidence interval over seeds. The wall-clock
axis is read from each node's own step times, which on one machine share its cores with the other
nodes of the run: it is reported, but equal steps and equal own generation are what the machine
can measure fairly. Nodes of one run learn from each other, so a run's sharing nodes are one
sample of a seed, not four: the intervals are over seeds only.

Each run keeps its folder under ``--runs`` (a finished one is not rerun unless ``--rerun``);
writes exp_payoff[-TAG].md/.json/.png into ``--out``.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import statistics
from pathlib import Path

from common import ROOT
from common.curves import plot_panels
from common.processes import run_cli
from common.report import command_line, machine, write_experiment_report

from swarm_node.node.observe.held_out import evaluations  # importable: common puts the repo root on sys.path
from swarm_node.node.observe.metrics import read_metrics
from swarm_node.node.observe.paired import AXES, Point, curve_points, paired_comparison

# The arm's learner flags on top of every run's (the ``corrected`` arm is the node's defaults).
ARMS: dict[str, list[str]] = {
    "corrected": [],
    "count": ["--learner.lr_rule", "count"],
    "peer_sft": ["--learner.peer_sft_coef", "1.0"],
    "sapo": ["--learner.off_policy_correction", "false", "--learner.lr_rule", "none",
             "--learner.scale_rewards", "group"],
}
SOLO = "solo"  # the corrected run's control nodes
REGIMES: dict[str, tuple[list[str], list[int]]] = {"dense": (["counting"], [2]), "sparse": (["counting"], [3])}
LOCAL, EXTERNAL = 4, 4  # I and J: a sharing node's own and its peers' groups a step
METRICS = ("greedy", "sampled")
AXIS_WORDS = {"step": "equal steps", "own_groups": "equal own generation", "seconds": "equal wall-clock"}


def run_flags(args, regime: str, arm: str, seed: int) -> list[str]:
    """The ``swarm-node sim`` arguments of one run (pure)."""
    families, levels = REGIMES[regime]
    flags = ["sim", "--nodes", str(args.nodes), "--transport", args.transport,
             "--train.steps", str(args.steps), "--train.seed", str(seed * 100),
             "--generation.prompts_per_step", str(LOCAL + EXTERNAL), "--swarm.external_groups", str(EXTERNAL),
             "--swarm.round_seconds", str(args.round_seconds), "--run.progress", "plain",
             "--tasks.families", json.dumps(families), "--tasks.difficulties", json.dumps(levels),
             "--learner.learning_rate", str(args.learning_rate),
             "--eval.every", str(args.eval_every), "--eval.tasks_per_family", str(args.eval_tasks),
             "--eval.samples", str(args.eval_samples), "--eval.at_start", "true"]
    if arm == "corrected" and args.controls:
        flags += ["--control", str(args.controls)]
    return flags + ARMS[arm]


def run_dir(args, regime: str, arm: str, seed: int) -> Path:
    return args.runs / f"{regime}-{arm}-s{seed}-{args.steps}steps"


def node_points(node_dir: Path, own_per_step: int, metric: str) -> list[Point]:
    records = read_metrics(node_dir / "metrics.jsonl")
    return curve_points(evaluations(records, node_dir), records, own_per_step, metric)


def mean_curve(curves: list[list[Point]]) -> list[Point]:
    """The nodes' mean curve at the steps every one of them evaluated (pure): own generation is
    the same at a step, seconds and score are averaged."""
    if not curves or any(not c for c in curves):
        return []
    by_step = [{p.step: p for p in c} for c in curves]
    steps = sorted(set.intersection(*(set(b) for b in by_step)))
    return [Point(s, by_step[0][s].own_groups, statistics.mean(b[s].seconds for b in by_step),
                  statistics.mean(b[s].score for b in by_step)) for s in steps]


def seed_curves(folder: Path, nodes: range, metric: str) -> list[Point]:
    return mean_curve([node_points(folder / f"node{i}", LOCAL, metric) for i in nodes])


def end_score(curve: list[Point], last: int = 3) -> float | None:
    after = [p.score for p in curve if p.step > 0][-last:]
    return statistics.mean(after) if after else None


def interval_text(iv: dict | None) -> str:
    """An interval as the report prints it: the mean difference [its 95% interval]."""
    if iv is None:
        return "-"
    if iv["low"] is None:
        return f"{iv['diff']:+.3f} (1 seed)"
    return f"{iv['diff']:+.3f} [{iv['low']:+.3f}, {iv['high']:+.3f}]"


def comparison(a: list, b: list) -> dict:
    """``paired_comparison`` as plain dicts (for the JSON record and the table)."""
    return {ax: (dataclasses.asdict(iv) if iv is not None else None) for ax, iv in paired_comparison(a, b).items()}


def collect(args) -> dict:
    """Run what is missing, then every arm's per-seed curves: {regime: {arm: {metric: [curve per seed]}}}."""
    out: dict = {}
    for regime in args.regimes:
        out[regime] = {a: {m: [] for m in METRICS} for a in [SOLO, *args.arms]}
        for seed in args.seeds:
            for arm in args.arms:
                d = run_cli(run_flags(args, regime, arm, seed), run_dir(args, regime, arm, seed), "summary.json",
                            args.rerun)
                for m in METRICS:
                    out[regime][arm][m].append(seed_curves(d, range(args.nodes), m))
                    if arm == "corrected" and args.controls:
                        out[regime][SOLO][m].append(seed_curves(d, range(args.nodes, args.nodes + args.controls), m))
    return out


def compare(curves: dict, args) -> dict:
    """End scores per arm and the comparisons (arm − solo; lever − corrected), per regime and metric."""
    result: dict = {}
    for regime, arms in curves.items():
        r = result[regime] = {}
        for m in METRICS:
            ends = {a: [e for c in cs[m] if (e := end_score(c)) is not None] for a, cs in arms.items()}
            rows = {}
            for a, cs in arms.items():
                row = {"end": statistics.mean(ends[a]) if ends[a] else None,
                       "end_sd": statistics.pstdev(ends[a]) if len(ends[a]) > 1 else None, "seeds": len(ends[a]),
                       "start": statistics.mean(c[0].score for c in cs[m] if c and c[0].step == 0)
                       if any(c and c[0].step == 0 for c in cs[m]) else None}
                if a != SOLO and arms[SOLO][m]:
                    row["vs_solo"] = comparison(cs[m], arms[SOLO][m])
                if a not in (SOLO, "corrected"):
                    row["vs_corrected"] = comparison(cs[m], arms["corrected"][m])
                rows[a] = row
            r[m] = rows
    return result


def report(args, result: dict) -> list[str]:
    md = ["# Does joining pay? Sharing against the same machine alone, with the levers", "",
          f"`{command_line()}`", "",
          f"{args.nodes} sharing nodes over the {args.transport} transport, {LOCAL} own + {EXTERNAL} peer groups of 8 "
          f"a step, {args.steps} steps, learning rate {args.learning_rate:g}, seeds {args.seeds}; solo = "
          f"{args.controls} control node(s) in each corrected run (the same recipe alone, {LOCAL} own groups a step). "
          f"Held-out: {args.eval_tasks} questions a family, greedy and {args.eval_samples} samples each, before "
          f"training and every {args.eval_every} steps; end score = the mean of the last three evaluations. "
          f"Differences per seed, mean over seeds, [Student t 95% confidence interval over seeds]; on {machine()}.", ""]
    for regime, by_metric in result.items():
        families, levels = REGIMES[regime]
        md += [f"## {regime}: {', '.join(families)} level {'/'.join(map(str, levels))}", ""]
        for m, rows in by_metric.items():
            md += [f"### held-out pass@1, {m}", "",
                   "| arm | start | end score (± sd over seeds) | − solo, equal steps | − solo, equal own generation "
                   "| − solo, equal wall-clock | − corrected, equal steps |",
                   "|---|---:|---:|---:|---:|---:|---:|"]
            for a, row in rows.items():
                def iv(key: str, ax: str, row: dict = row) -> str:
                    return interval_text((row.get(key) or {}).get(ax))
                end = "-" if row["end"] is None else f"{row['end']:.3f}" + (
                    f" ± {row['end_sd']:.3f}" if row["end_sd"] is not None else "")
                start = "-" if row["start"] is None else f"{row['start']:.3f}"
                md.append(f"| {a} | {start} | {end} | {iv('vs_solo', 'step')} | {iv('vs_solo', 'own_groups')} "
                          f"| {iv('vs_solo', 'seconds')} | {iv('vs_corrected', 'step')} |")
            md.append("")
    if len(args.seeds) < 5:
        md += [f"**{len(args.seeds)} seed(s): a plumbing check, not a result.** A t interval over so few seeds is "
               "wide (t(0.975, 1) = 12.7) and leans on their differences being normal; the study's claim needs 5 or "
               "more.", ""]
    md += ["An interval that excludes 0 says the arm differed from the other beyond the spread of its seeds; "
           "one that includes 0 says these seeds cannot tell. Equal own generation reads the solo curve where "
           "it had generated as many groups as the sharing nodes at their end (the same step here: both generate "
           f"{LOCAL} a step); equal wall-clock reads it at the sharing nodes' elapsed time, on cores the run's nodes "
           "shared.", ""]
    return md


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--regimes", nargs="+", choices=list(REGIMES), default=list(REGIMES))
    ap.add_argument("--arms", nargs="+", choices=list(ARMS), default=list(ARMS),
                    help="sharing arms (solo comes with corrected)")
    ap.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2, 3, 4])
    ap.add_argument("--nodes", type=int, default=4)
    ap.add_argument("--controls", type=int, default=2, help="solo nodes in each corrected run")
    ap.add_argument("--steps", type=int, default=200)
    ap.add_argument("--learning-rate", type=float, default=1e-4)
    ap.add_argument("--eval-every", type=int, default=25)
    ap.add_argument("--eval-tasks", type=int, default=256)
    ap.add_argument("--eval-samples", type=int, default=4)
    ap.add_argument("--round-seconds", type=float, default=1.5)
    ap.add_argument("--transport", default="memory", choices=["memory", "hivemind"])
    ap.add_argument("--runs", type=Path, default=ROOT / "runs" / "exp_payoff")
    ap.add_argument("--out", type=Path, default=ROOT / "docs" / "results")
    ap.add_argument("--tag", default="")
    ap.add_argument("--rerun", action="store_true")
    args = ap.parse_args()
    if "corrected" not in args.arms:
        ap.error("the corrected arm carries the solo nodes and is every lever's reference: include it")
    if args.transport == "hivemind" and not args.tag:
        args.tag = "hivemind"  # a confirmation run does not overwrite the study's report
    args.runs.mkdir(parents=True, exist_ok=True)
    curves = collect(args)
    result = compare(curves, args)
    tag = f"-{args.tag}" if args.tag else ""
    panels = {f"{regime} ({m})": {a: [[(p.step, p.score) for p in c] for c in cs[m] if c]
                                  for a, cs in arms.items() if any(cs[m])}
              for regime, arms in curves.items() for m in METRICS}
    plot_panels(panels, args.out / f"exp_payoff{tag}.png", "held-out pass@1", sparse=True)
    write_experiment_report(args.out, f"exp_payoff{tag}", report(args, result),
                            {"args": {k: str(v) for k, v in vars(args).items()}, "axes": list(AXES), "result": result},
                            "held-out pass@1 per arm, mean over seeds")
    print((args.out / f"exp_payoff{tag}.md").read_text())


if __name__ == "__main__":
    main()
