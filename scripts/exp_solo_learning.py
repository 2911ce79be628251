"""Does the embedded default learn? Solo training runs over several seeds, one report.

    python scripts/exp_solo_learning.py                    # 3 seeds x 600 steps (~3 min each on 2 cores)
    python scripts/exp_solo_learning.py --seeds 0 1 2 --steps 600 --out docs/results

Each seed is a real ``swarm-node train`` run (separate process, its own run folder under
``runs/exp_solo/``). The report compares the mean correctness reward of the first and the last 20
steps (the target is a ratio of at least 1.5 within 10 minutes of training per seed) and plots the
three reward curves on one figure. Writes ``solo_learning.json`` and ``solo_learning.md`` plus
``solo_learning.png`` into ``--out``.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from swarm_node.node.observe.metrics import read_metrics  # noqa: E402
from swarm_node.node.observe.plots import rolling_mean  # noqa: E402
from common.report import command_line, write_json, write_markdown  # noqa: E402

WINDOW = 20


def run_seed(seed: int, steps: int, run_root: Path, extra: list[str]) -> dict:
    run_dir = run_root / f"seed{seed}"
    cmd = [sys.executable, "-m", "swarm_node.node.cli", "train", "--train.seed", str(seed), "--train.steps", str(steps),
           "--run.dir", str(run_dir), "--run.progress", "off", "--run.checkpoint_every", "0", *extra]
    if run_dir.exists():
        import shutil

        shutil.rmtree(run_dir)
    t0 = time.monotonic()
    subprocess.run(cmd, check=True, cwd=ROOT, stdout=subprocess.DEVNULL)
    wall = time.monotonic() - t0
    recs = read_metrics(run_dir / "metrics.jsonl")
    summary = json.loads((run_dir / "summary.json").read_text())  # first/last windows, as the node reports them
    first, last = summary["correct_first"], summary["correct_last"]
    return {"seed": seed, "steps": len(recs), "wall_s": round(wall, 1),
            "train_s": round(sum(r["step_time"] for r in recs), 1),
            "correct_first20": round(first, 4), "correct_last20": round(last, 4),
            "ratio": round(last / first, 3) if first else float("nan"),
            "correct": [r["correct"] for r in recs],
            "rho_mean": round(sum(r.get("rho", 1.0) for r in recs) / len(recs), 4)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    ap.add_argument("--steps", type=int, default=600)
    ap.add_argument("--out", type=Path, default=ROOT / "docs" / "results")
    ap.add_argument("--run-root", type=Path, default=ROOT / "runs" / "exp_solo")
    ap.add_argument("extra", nargs="*", help="extra swarm-node train flags, after --")
    args = ap.parse_args()
    results = [run_seed(s, args.steps, args.run_root, args.extra) for s in args.seeds]

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(8, 4.5))
    for r in results:
        ax.plot(range(1, len(r["correct"]) + 1), rolling_mean(r["correct"], WINDOW),
                label=f"seed {r['seed']} ({r['correct_first20']:.2f} -> {r['correct_last20']:.2f})")
    ax.set_xlabel("step")
    ax.set_ylabel(f"correctness reward ({WINDOW}-step mean)")
    ax.set_title("embedded default, solo node: correctness reward of training rollouts")
    ax.grid(alpha=0.3)
    ax.legend()
    args.out.mkdir(parents=True, exist_ok=True)
    fig.tight_layout()
    fig.savefig(args.out / "solo_learning.png", dpi=100)

    cmd = command_line()
    lines = [
        "# Solo learning on the embedded default",
        "",
        f"Command: `{cmd}`",
        "",
        f"Mean correctness reward of the training rollouts, first vs last {WINDOW} steps "
        f"({args.steps} steps per seed, default config).",
        "",
        "| seed | steps | train time (s) | wall (s) | first 20 | last 20 | last/first | mean ESS/B |",
        "|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in results:
        lines.append(f"| {r['seed']} | {r['steps']} | {r['train_s']} | {r['wall_s']} | {r['correct_first20']:.3f} | "
                     f"{r['correct_last20']:.3f} | {r['ratio']:.2f}x | {r['rho_mean']:.3f} |")
    mean_ratio = sum(r["ratio"] for r in results) / len(results)
    lines += ["", f"Mean ratio over seeds: **{mean_ratio:.2f}x**; worst seed {min(r['ratio'] for r in results):.2f}x.",
              "", "![reward curves](solo_learning.png)", ""]
    write_markdown(args.out / "solo_learning.md", lines, end="")
    write_json(args.out / "solo_learning.json",
               {"command": cmd, "results": [{k: v for k, v in r.items() if k != "correct"} for r in results]}, end="")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
