"""Does joining pay? Sharing nodes against the same machine alone, with the levers that should let
more data make a bigger step (issue 37), in a dense and a sparse regime, over seeds, with intervals.

    python scripts/exp_payoff.py                                  # the study: 2 regimes, 5 seeds, 200 steps
    python scripts/exp_payoff.py --regimes dense --seeds 0 --steps 40 --eval-every 10 --tag pilot
    python scripts/exp_payoff.py --transport hivemind --regimes dense --seeds 0 --arms corrected  # confirm over hivemind

Every run is ``swarm-node sim --transport memory --nodes 4`` on the embedded default model: each
step a sharing node trains on 8 groups of 8 completions, 4 it generated (I) and 4 from its peers (J).
The arms (``ARMS``), each its own run per regime and seed, the same flags but the arm's:

- **solo**: each run's ``--control C`` nodes: the same recipe and the arm's learner flags, alone, on
  the I groups a sharing node generates itself a step (node/sim/control.py), each its own seed; every
  arm has its own, so arm − solo is what sharing adds under that learner (SAPO's std scaling, or the
  count rule, is a change a solo node could make too) and every run holds as many nodes;
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
step 0 on 256 held-out questions with 4 samples each (the embedded model of recipe ddb9dba97039),
by ``node/evaluate/evaluate.py``'s ``evaluate`` at seed 0 with one torch thread (a throwaway
script, not kept); the sampled figure moves with the seed (dense 0.103 here, 0.117 in
docs/measurements.md's run of the same model, 2 of 256 level-3 questions are also in the warm
start).

What is measured: each node's held-out evaluation (``--eval-tasks`` questions, greedy and
``--eval-samples`` sampled completions each) before training and every ``--eval-every`` steps;
a run's curve per seed is the mean over its sharing (or control) nodes at each evaluated step, and
its **end score** the mean of its last three evaluations (node/observe/held_out.py). Nodes of one
run learn from each other, so a run's sharing nodes are one sample of a seed, not four: every
interval is over seeds (node/observe/paired.py: the mean of the seeds' differences with its Student
t 95% confidence interval).

**The primary comparison, declared before any run**: corrected − solo, greedy held-out pass@1, at
equal own generation, one per regime, its p-value (a paired t-test over seeds) Holm-corrected over
the regimes. Everything else in the report (the levers, sampled pass@1, equal steps) is
exploratory: with 16 intervals against one baseline, one excluding 0 by chance is likely.

Pairing: sharing node i of seed s has the same identity in every arm (a key per seed and node kept
under ``--runs``), so it draws the same questions in every arm and lever − corrected differences
cancel the question draw; arm − solo pairs nothing but the seed number (a solo node draws from the
seed alone), which is valid, without the variance it would cancel. Wall-clock: sharing nodes take
one step a round, so their elapsed time is mostly ``--round-seconds`` × steps, a knob of the
study, and a run's nodes share the machine's cores: equal wall-clock is kept in the JSON, not
reported in the table. The report states the smallest difference these seeds could detect (80%
power, from the primary comparison's own spread).

Each run keeps its folder under ``--runs``, named by its regime, arm, seed, transport and a digest
of its flags (a finished one is not rerun unless ``--rerun``; one that stopped early, failed or
trained fewer steps is refused with its folder named); writes exp_payoff[-TAG].md/.json/.png into ``--out``.
"""

from __future__ import annotations

import argparse
import dataclasses
import hashlib
import json
import statistics
from pathlib import Path

from common import ROOT
from common.curves import plot_panels
from common.processes import run_cli
from common.report import command_line, machine, write_experiment_report

from swarm_node.node.observe.held_out import answer_agreement, evaluations  # importable: common puts the repo root on sys.path
from swarm_node.node.observe.metrics import read_metrics
from swarm_node.node.observe.paired import AXES, Point, curve_points, paired_comparison, seed_differences

# The arm's learner flags on top of every run's (the ``corrected`` arm is the node's defaults).
ARMS: dict[str, list[str]] = {
    "corrected": [],
    "count": ["--learner.lr_rule", "count"],
    "peer_sft": ["--learner.peer_sft_coef", "1.0"],
    "sapo": ["--learner.off_policy_correction", "false", "--learner.lr_rule", "none",
             "--learner.scale_rewards", "group"],
}
SOLO = "solo"  # each run's control nodes: "solo:ARM" holds the arm's
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
    if args.controls:
        flags += ["--control", str(args.controls)]
    return flags + ARMS[arm]


def run_dir(args, flags: list[str], regime: str, arm: str, seed: int) -> Path:
    """A run's folder: what it is, and a digest of every flag, so a run with other settings (another
    learning rate, transport or evaluation) is never taken for this one."""
    digest = hashlib.sha256(json.dumps(flags).encode()).hexdigest()[:8]
    return args.runs / f"{regime}-{arm}-s{seed}-{args.transport}-{digest}"


def identities(args, seed: int) -> Path:
    """A faults file giving sharing node i of ``seed`` the same key in every arm (made once): the
    same peer id, so the same question stream (a swarm node draws from its seed and peer id)."""
    from swarm_node.protocol.identity import load_or_create_identity

    folder = args.runs / "identities"
    lines = []
    for i in range(args.nodes):
        key = folder / f"s{seed}-node{i}.pem"
        load_or_create_identity(key)  # made here, before any node could race to make it
        lines.append(f'[[node]]\nindex = {i}\nflags = {{ "swarm.identity" = "{key}" }}\n')
    faults = folder / f"s{seed}.toml"
    faults.write_text("\n".join(lines))
    return faults


def finished(folder: Path, steps: int) -> Path:
    """``folder`` if its sim ran every node to ``steps``; else SystemExit naming it (a stopped,
    failed or short run must not enter a comparison as if it were whole)."""
    s = json.loads((folder / "summary.json").read_text())
    short = {n.get("node"): n.get("steps") for n in s.get("nodes", []) if (n.get("steps") or 0) < steps}
    if s.get("partial") or s.get("failed") or short:
        raise SystemExit(f"{folder}: not a whole run (partial {s.get('partial')}, failed {s.get('failed') or {}}, "
                         f"short of {steps} steps {short}); rerun it with --rerun or remove the folder")
    return folder


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


def end_agreement(folder: Path, nodes: range) -> float | None:
    """How alike the nodes' greedy answers were at their last evaluation: the mean over pairs of
    the share of held-out questions both answered alike (node/observe/held_out.py). Sharing nodes
    that grow alike (the sharpening hypothesis of issue 37) read higher than their solo nodes,
    which start from the same weights and only drift apart or together on their own."""
    last = [evaluations(read_metrics(folder / f"node{i}" / "metrics.jsonl"), folder / f"node{i}") for i in nodes]
    digests = [ev[-1].get("greedy_answers") for ev in last if ev]
    pairs = [answer_agreement(a, b) for k, a in enumerate(digests) for b in digests[k + 1:]]
    pairs = [p for p in pairs if p is not None]
    return statistics.mean(pairs) if pairs else None


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
        out[regime] = {name: {m: [] for m in METRICS} | {"agreement": []}
                       for a in args.arms for name in (a, f"{SOLO}:{a}")}
        for seed in args.seeds:
            faults = identities(args, seed)
            for arm in args.arms:
                flags = run_flags(args, regime, arm, seed)
                d = finished(run_cli([*flags, "--faults", str(faults)], run_dir(args, flags, regime, arm, seed),
                                     "summary.json", args.rerun), args.steps)
                sharing, solo = range(args.nodes), range(args.nodes, args.nodes + args.controls)
                out[regime][arm]["agreement"].append(end_agreement(d, sharing))
                out[regime][f"{SOLO}:{arm}"]["agreement"].append(end_agreement(d, solo))
                for m in METRICS:
                    out[regime][arm][m].append(seed_curves(d, range(args.nodes), m))
                    out[regime][f"{SOLO}:{arm}"][m].append(
                        seed_curves(d, range(args.nodes, args.nodes + args.controls), m))
    return out


def holm(pvalues: dict[str, float]) -> dict[str, float]:
    """Holm's step-down adjusted p-values (pure): the k-th smallest of m times (m − k + 1), never
    below the one before it, at most 1."""
    order = sorted(pvalues, key=pvalues.get)
    out, running = {}, 0.0
    for k, name in enumerate(order):
        running = max(running, min(1.0, (len(order) - k) * pvalues[name]))
        out[name] = running
    return out


def t_pvalue(diffs: list[float]) -> float | None:
    """Two-sided p-value of a one-sample t-test of the seeds' differences against 0."""
    from scipy import stats

    if len(diffs) < 2 or statistics.stdev(diffs) == 0:
        return None
    return float(stats.ttest_1samp(diffs, 0.0).pvalue)


def detectable(diffs: list[float], power: float = 0.8, alpha: float = 0.05) -> float | None:
    """The smallest true mean difference these seeds would find with ``power`` (two-sided t at
    ``alpha``), from the differences' own spread: (t_{1-α/2} + t_{power}) · s / √n, n − 1 degrees."""
    from scipy import stats

    n = len(diffs)
    if n < 2:
        return None
    return float((stats.t.ppf(1 - alpha / 2, n - 1) + stats.t.ppf(power, n - 1)) * statistics.stdev(diffs) / n ** 0.5)


def compare(curves: dict, args) -> dict:
    """End scores per arm and its solo nodes; the comparisons (arm − its solo; lever − corrected);
    the primary comparison per regime with its Holm-adjusted p-value and detectable difference."""
    result: dict = {"regimes": {}, "primary": {}}
    for regime, arms in curves.items():
        r = result["regimes"][regime] = {}
        for m in METRICS:
            rows = {}
            for a, cs in arms.items():
                ends = [e for c in cs[m] if (e := end_score(c)) is not None]
                row = {"end": statistics.mean(ends) if ends else None,
                       "end_sd": statistics.stdev(ends) if len(ends) > 1 else None, "seeds": len(ends),
                       "start": statistics.mean(c[0].score for c in cs[m] if c and c[0].step == 0)
                       if any(c and c[0].step == 0 for c in cs[m]) else None}
                if not a.startswith(SOLO):
                    row["vs_solo"] = comparison(cs[m], arms[f"{SOLO}:{a}"][m])
                    if a != "corrected":
                        row["vs_corrected"] = comparison(cs[m], arms["corrected"][m])
                rows[a] = row
            r[m] = rows
        r["agreement"] = {a: (statistics.mean(v) if (v := [x for x in cs["agreement"] if x is not None]) else None)
                          for a, cs in arms.items()}
        diffs = seed_differences(arms["corrected"]["greedy"], arms[f"{SOLO}:corrected"]["greedy"], "own_groups")
        result["primary"][regime] = {"diffs": diffs, "p": t_pvalue(diffs), "detectable_80": detectable(diffs),
                                     "interval": r["greedy"]["corrected"]["vs_solo"]["own_groups"]}
    ps = {k: v["p"] for k, v in result["primary"].items() if v["p"] is not None}
    for k, adj in holm(ps).items():
        result["primary"][k]["p_holm"] = adj
    return result


def cell(row: dict, key: str, axis: str) -> str:
    return interval_text((row.get(key) or {}).get(axis))


def report(args, result: dict) -> list[str]:
    md = ["# Does joining pay? Sharing against the same machine alone, with the levers", "",
          f"`{command_line()}`", "",
          f"{args.nodes} sharing nodes over the {args.transport} transport, {LOCAL} own + {EXTERNAL} peer groups of 8 "
          f"a step, {args.steps} steps, learning rate {args.learning_rate:g}, seeds {args.seeds}; each run also "
          f"trains {args.controls} solo node(s): the same recipe and learner flags alone, {LOCAL} own groups a step. "
          f"Held-out: {args.eval_tasks} questions a family, greedy and {args.eval_samples} samples each, before "
          f"training and every {args.eval_every} steps; end score = the mean of the last three evaluations. "
          f"Differences: the mean over seeds of each seed's difference [its Student t 95% confidence interval over seeds]; "
          f"on {machine()}.", ""]
    if len(args.seeds) < 5:
        md += [f"**{len(args.seeds)} seed(s): a plumbing check, not a result.** A t interval over so few seeds is "
               "wide (t(0.975, 1) = 12.7) and leans on their differences being normal; the study's claim needs 5 or "
               "more.", ""]
    md += ["## The primary comparison (declared before the runs)", "",
           "corrected − solo, greedy held-out pass@1, at equal own generation; p from a paired t-test over seeds, "
           "Holm-adjusted over the regimes.", "",
           "| regime | difference [95% CI] | seeds | p | p (Holm) | smallest difference these seeds detect (80% power) |",
           "|---|---:|---:|---:|---:|---:|"]
    for regime, pr in result["primary"].items():
        f = lambda x: "-" if x is None else f"{x:.3f}"  # noqa: E731
        md.append(f"| {regime} | {interval_text(pr['interval'])} | {len(pr['diffs'])} | {f(pr['p'])} "
                  f"| {f(pr.get('p_holm'))} | {f(pr['detectable_80'])} |")
    md += ["", "## Exploratory: every arm", ""]
    for regime, by_metric in result["regimes"].items():
        families, levels = REGIMES[regime]
        md += [f"### {regime}: {', '.join(families)} level {'/'.join(map(str, levels))}", ""]
        agree = by_metric.get("agreement") or {}
        for m, rows in ((m, by_metric[m]) for m in METRICS):
            md += [f"held-out pass@1, {m}:", "",
                   "| arm | start | end score (± sd over seeds) | − its solo, equal steps "
                   "| − its solo, equal own generation | − corrected, equal steps |",
                   "|---|---:|---:|---:|---:|---:|"]
            for a, row in rows.items():
                end = "-" if row["end"] is None else f"{row['end']:.3f}" + (
                    f" ± {row['end_sd']:.3f}" if row["end_sd"] is not None else "")
                start = "-" if row["start"] is None else f"{row['start']:.3f}"
                md.append(f"| {a} | {start} | {end} | {cell(row, 'vs_solo', 'step')} "
                          f"| {cell(row, 'vs_solo', 'own_groups')} | {cell(row, 'vs_corrected', 'step')} |")
            md.append("")
        md += ["How alike the nodes' greedy answers were at their last evaluation (the share of held-out questions "
               "two nodes answered alike, mean over pairs and seeds; solo nodes start from the same weights too):", "",
               "| arm | sharing nodes | its solo nodes |", "|---|---:|---:|"]
        fmt = lambda x: "-" if x is None else f"{x:.3f}"  # noqa: E731
        md += [f"| {a} | {fmt(agree.get(a))} | {fmt(agree.get(f'{SOLO}:{a}'))} |" for a in args.arms] + [""]
    md += ["An interval that excludes 0 says the arms differed beyond the spread of their seeds; one that "
           "includes 0 says these seeds cannot tell. Equal own generation and equal steps coincide here (sharing "
           f"and solo nodes both generate {LOCAL} groups a step). Equal wall-clock is in the JSON only: a sharing "
           "node's elapsed time is mostly the rounds' length, a setting of the study.", ""]
    return md


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--regimes", nargs="+", choices=list(REGIMES), default=list(REGIMES))
    ap.add_argument("--arms", nargs="+", choices=list(ARMS), default=list(ARMS),
                    help="sharing arms (solo comes with corrected)")
    ap.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2, 3, 4])
    ap.add_argument("--nodes", type=int, default=4)
    ap.add_argument("--controls", type=int, default=2, help="solo nodes in each run (the arm's learner, alone)")
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
        ap.error("the corrected arm is the primary comparison and every lever's reference: include it")
    if args.controls < 1:
        ap.error("--controls must be at least 1: the solo nodes are what every arm is compared with")
    if args.transport == "hivemind" and not args.tag:
        args.tag = "hivemind"  # a confirmation run does not overwrite the study's report
    args.runs.mkdir(parents=True, exist_ok=True)
    curves = collect(args)
    result = compare(curves, args)
    tag = f"-{args.tag}" if args.tag else ""
    panels = {f"{regime} ({m})": {a: [[(p.step, p.score) for p in c] for c in cs[m] if c]
                                  for a, cs in arms.items() if any(cs[m]) and a in (*args.arms, f"{SOLO}:corrected")}
              for regime, arms in curves.items() for m in METRICS}
    plot_panels(panels, args.out / f"exp_payoff{tag}.png", "held-out pass@1", sparse=True)
    write_experiment_report(args.out, f"exp_payoff{tag}", report(args, result),
                            {"args": {k: str(v) for k, v in vars(args).items()}, "axes": list(AXES), "result": result},
                            "held-out pass@1 per arm, mean over seeds")
    print((args.out / f"exp_payoff{tag}.md").read_text())


if __name__ == "__main__":
    main()
