"""No idle hardware: the synchronous loop against generation overlapped with learning
(``train.max_async 1``), APRIL partial rollouts (``generation.over_provision``) and both, on
long-tailed completions, in one run.

    python scripts/bench_throughput.py                     # 40 steps an arm, 2 rounds, docs/results
    python scripts/bench_throughput.py --steps 10 --rounds 1 --out /tmp/bt   # a quick look

The setting: the embedded default model warm-started with working traces of long-tailed length
before each answer (``DefaultModelRecipe(sft_trace_median=6)``: lognormal, median 6 words, sigma 1.2),
so its completions are long-tailed as reasoning traces are (the report gives the percentiles it
measured), 8 prompts x 8 completions of up to 128 tokens a step, one node training alone. A step
of the synchronous loop lasts as long as its longest completion.

Each arm is a real ``swarm-node train`` process from the same seed (same tasks, same start), no
held-out evaluation (it would time the same work in every arm); rounds run the arms in a rotated
order, so load drift on a shared machine favours none. Read from each run's metrics (its first two
steps left out: warm-up): finished groups a second (groups trained on over the steps' wall time),
the generation's and the learner's busy share of that time (their sum exceeds 1 where they ran at
once), the median step time over max(generation, learning) of the synchronous arm, and the
learning: correctness of the node's own completions over the last quarter of the steps, and its
curve against wall-clock seconds (the plot). Writes ``bench_throughput.{json,md,png}``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from common.report import command_line, environment, write_results  # noqa: E402

ARMS = {
    "sync": {},
    "overlap": {"train.max_async": 1},
    "april": {"generation.over_provision": 0.5},
    "overlap_april": {"train.max_async": 1, "generation.over_provision": 0.5},
}
WARMUP = 2  # steps left out of every statistic


def long_tail_model() -> Path:
    from swarm_node.policies.default_model import DefaultModelRecipe, ensure_default_model

    return ensure_default_model(replace(DefaultModelRecipe(), sft_trace_median=6.0))


def run_arm(name: str, model: Path, out: Path, args) -> list[dict]:
    run = out / "runs" / name
    flags = {"model.name": str(model), "run.dir": str(run), "run.resume": "false", "run.progress": "off",
             "run.plot": "false", "run.checkpoint_every": "0", "train.steps": str(args.steps),
             "train.seed": str(args.seed), "generation.max_completion_length": str(args.max_new_tokens),
             "eval.every": "0", "eval.at_end": "false", "eval.at_start": "false",
             "train.threads": str(args.threads_overlap if "overlap" in name else args.threads),
             **{k: str(v) for k, v in ARMS[name].items()}}
    argv = [sys.executable, "-m", "swarm_node.node.cli", "train"] + [x for k, v in flags.items() for x in (f"--{k}", v)]
    if run.exists():
        import shutil

        shutil.rmtree(run)
    subprocess.run(argv, cwd=ROOT, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                   env={**os.environ, "PYTHONUNBUFFERED": "1"})
    return [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()
            if line.strip() and "step" in json.loads(line)]


def summarise(recs: list[dict], groups_per_step: int) -> dict:
    later = recs[WARMUP:]
    wall = sum(r["step_time"] for r in later)
    gen, learn = sum(r["gen_time"] for r in later), sum(r["learn_time"] for r in later)
    quarter = max(1, len(recs) // 4)
    lengths = [r["completion_len"] for r in later if r.get("completion_len") is not None]
    return {"steps": len(recs), "wall_s": round(wall, 2),
            "groups_per_s": round(len(later) * groups_per_step / wall, 3),
            "gen_share": round(gen / wall, 3), "learn_share": round(learn / wall, 3),
            "busy_share": round((gen + learn) / wall, 3),
            "step_s": round(statistics.median(r["step_time"] for r in later), 3),
            "gen_s": round(statistics.median(r["gen_time"] for r in later), 3),
            "learn_s": round(statistics.median(r["learn_time"] for r in later), 3),
            "gen_wait_s": round(statistics.median(r.get("gen_wait", r["gen_time"]) for r in later), 3),
            "staleness_max": max(r["staleness"] for r in recs),
            "finite": all(isinstance(r.get("loss"), float) and r["loss"] == r["loss"] for r in recs),
            "correct_first_quarter": round(statistics.mean(r["correct"] for r in recs[:quarter]), 4),
            "correct_last_quarter": round(statistics.mean(r["correct"] for r in recs[-quarter:]), 4),
            "mean_trained_completion_len": round(statistics.mean(lengths), 1) if lengths else None,
            "curve": [(round(sum(r["step_time"] for r in recs[:i + 1]), 2), r["correct"]) for i, r in enumerate(recs)]}


def length_percentiles(model: Path, args) -> dict:
    """The setting's completion lengths: the synchronous loop's first steps' prompts, sampled."""
    import numpy as np
    import torch

    from swarm_node.node.run.rollouts import round_task_ids
    from swarm_node.policies.policy import Policy, SamplingParams
    from swarm_node.rewards.registry import make_task

    torch.manual_seed(args.seed)
    policy = Policy.load(model)
    lens = []
    for step in range(4):
        ids = round_task_ids(args.seed, step, 8, ["arithmetic", "lists", "base", "boolean", "counting"], [1])
        groups = policy.generate([policy.prompt_of(make_task(t)) for t in ids], 8,
                                 SamplingParams(max_new_tokens=args.max_new_tokens))
        lens += [len(c.completion_ids) for g in groups for c in g]
    a = np.array(lens)
    return {"p50": float(np.percentile(a, 50)), "p90": float(np.percentile(a, 90)),
            "p99": float(np.percentile(a, 99)), "max": int(a.max()), "mean": round(float(a.mean()), 1),
            "truncated_share": round(float((a >= args.max_new_tokens).mean()), 3), "completions": len(lens)}


def plot(result: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from swarm_node.node.observe.plots import rolling_mean

    fig, ax = plt.subplots(figsize=(7, 4))
    for name, runs in result["rounds"].items():
        t, c = zip(*runs[0]["curve"])
        ax.plot(t, rolling_mean(list(c), 5), label=name)
    ax.set_xlabel("wall-clock seconds (training steps)")
    ax.set_ylabel("correct (own completions, 5-step mean)")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--steps", type=int, default=40)
    ap.add_argument("--rounds", type=int, default=2, help="times each arm runs (orders rotated)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--threads", type=int, default=2,
                    help="torch threads of the arms that do not overlap (2: the same cores as an overlapped arm's two sides at 1 each)")
    ap.add_argument("--threads-overlap", type=int, default=1,
                    help="torch threads of the overlapped arms (each side, generation and learning, uses this many)")
    ap.add_argument("--arms", default=",".join(ARMS))
    ap.add_argument("--model", type=Path, default=None, help="another model folder (default: the long-tail setting's, built once)")
    ap.add_argument("--max-new-tokens", type=int, default=128)
    ap.add_argument("--tag", default="", help="suffix of the output file names")
    ap.add_argument("--out", type=Path, default=ROOT / "docs" / "results")
    args = ap.parse_args()
    names = [a for a in args.arms.split(",") if a]
    t0 = time.time()
    model = args.model or long_tail_model()
    result = {"command": command_line(), "environment": environment(), "setting": length_percentiles(model, args),
              "rounds": {n: [] for n in names}}
    for k in range(args.rounds):
        for name in names[k % len(names):] + names[:k % len(names)]:
            recs = run_arm(name, model, args.out / "bench_throughput_runs", args)
            result["rounds"][name].append(summarise(recs, 8))
            print(f"round {k + 1} {name}: " + json.dumps({x: y for x, y in result["rounds"][name][-1].items()
                                                          if x != "curve"}), flush=True)
    med = {n: {key: statistics.median(r[key] for r in runs) for key in
               ("groups_per_s", "gen_share", "learn_share", "busy_share", "step_s", "gen_s", "learn_s",
                "gen_wait_s", "correct_last_quarter", "staleness_max")}
           for n, runs in result["rounds"].items()}
    base = med.get("sync")
    if base:
        floor = max(base["gen_s"], base["learn_s"])
        for n, m in med.items():
            m["groups_per_s_vs_sync"] = round(m["groups_per_s"] / base["groups_per_s"], 3)
            m["step_over_sync_max_gen_learn"] = round(m["step_s"] / floor, 3)
    result["median"] = med
    result["total_s"] = round(time.time() - t0, 1)
    s = result["setting"]
    md = [f"# Throughput: synchronous, overlap, APRIL, both (long-tailed completions)", "",
          f"    {result['command']}", "",
          f"{result['environment']['machine']}, torch {result['environment']['torch']}, load average "
          f"{result['environment']['load_avg_1m']:.1f} at the start; {args.rounds} round(s) of {args.steps} "
          f"steps an arm, medians over rounds ({result['total_s']:.0f} s in all). Completion lengths of the "
          f"setting (untrained, {s['completions']} sampled): p50 {s['p50']:.0f}, p90 {s['p90']:.0f}, "
          f"p99 {s['p99']:.0f}, max {s['max']} of {args.max_new_tokens} tokens, mean {s['mean']}.", "",
          "| arm | groups/s | vs sync | step s | step / sync max(gen, learn) | gen s | learn s | gen share | "
          "learn share | correct (last quarter) | staleness max |",
          "|---|---|---|---|---|---|---|---|---|---|---|"]
    for n, m in med.items():
        md.append(f"| {n} | {m['groups_per_s']:.2f} | {m.get('groups_per_s_vs_sync', 1):.2f}x | {m['step_s']:.2f} | "
                  f"{m.get('step_over_sync_max_gen_learn', 0):.2f} | {m['gen_s']:.2f} | {m['learn_s']:.2f} | "
                  f"{m['gen_share']:.2f} | {m['learn_share']:.2f} | {m['correct_last_quarter']:.3f} | "
                  f"{m['staleness_max']:.0f} |")
    stem = "bench_throughput" + (f"-{args.tag}" if args.tag else "")
    md += ["", f"![correctness against wall-clock seconds]({stem}.png)"]
    args.out.mkdir(parents=True, exist_ok=True)
    plot(result, args.out / f"{stem}.png")
    print(write_results(args.out, stem, result, md))


if __name__ == "__main__":
    main()
