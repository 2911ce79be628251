"""What the experiment scripts share: running one `swarm-node` command per configuration (skipped
when its folder is complete), reading correctness curves back, the curve statistics the reports
use, and the plot of mean curves per variant."""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from node.observe.plots import rolling_mean  # noqa: E402

WINDOW = 20  # steps in the rolling mean and in "final" (the last WINDOW steps)


def command_line() -> str:
    """How this report was made: ``python scripts/NAME.py ARGS``."""
    return " ".join(["python", f"scripts/{Path(sys.argv[0]).name}", *sys.argv[1:]])


def run_cli(args: list[str], run_dir: Path, done_file: str, rerun: bool = False) -> Path:
    """Run ``swarm-node ARGS --run.dir RUN_DIR`` (one torch thread, output to the log) unless
    ``RUN_DIR/DONE_FILE`` exists already, which a finished run leaves behind."""
    if (run_dir / done_file).exists() and not rerun:
        print(f"{run_dir}: done already (--rerun to redo)", flush=True)
        return run_dir
    cmd = [sys.executable, "-m", "node.cli", *args, "--run.dir", str(run_dir), "--run.checkpoint_every", "0"]
    t0 = time.time()
    print(f"{run_dir.name}: swarm-node {' '.join(args)}", flush=True)
    subprocess.run(cmd, check=True, cwd=ROOT, env=dict(os.environ, OMP_NUM_THREADS="1"),
                   stdout=subprocess.DEVNULL)
    print(f"  {time.time() - t0:.0f} s", flush=True)
    return run_dir


def correctness(recs: list[dict]) -> list[float]:
    """Per step, the mean correctness of the node's own completions."""
    return [r.get("correct") or 0.0 for r in recs]


def final(curve: list[float]) -> float:
    """The mean of the last WINDOW steps: a run's final reward."""
    return statistics.mean(curve[-WINDOW:])


def first_reach(curve: list[float], target: float) -> int | None:
    """The first step whose WINDOW-step rolling mean reaches ``target``, or None."""
    for i, v in enumerate(rolling_mean(curve, WINDOW)):
        if i + 1 >= WINDOW and v >= target:
            return i + 1
    return None


def worst_dip(curve: list[float]) -> float:
    """The largest fall of the rolling mean below its running peak: a collapse shows as a large dip."""
    peak, dip = 0.0, 0.0
    for i, v in enumerate(rolling_mean(curve, WINDOW)):
        if i + 1 >= WINDOW:
            peak = max(peak, v)
            dip = max(dip, peak - v)
    return dip


NOTES = "## What this shows"


def write_report(out: Path, stem: str, lines: list[str], result: dict, plot_alt: str) -> None:
    """Write ``STEM.json`` (the numbers) and ``STEM.md`` (the report's lines, then the plot
    ``STEM.png`` the script drew). A hand-written "## What this shows" section already at the end
    of the markdown file (the reading of the numbers) is kept, so rerunning a script does not
    erase it."""
    out.mkdir(parents=True, exist_ok=True)
    (out / f"{stem}.json").write_text(json.dumps(result, indent=2))
    lines = [*lines, f"\n![{plot_alt}]({stem}.png)"]
    path, notes = out / f"{stem}.md", ""
    if path.exists() and NOTES in (old := path.read_text()):
        notes = "\n" + old[old.index(NOTES):]
    path.write_text("\n".join(lines) + "\n" + notes)
    print("\n".join(lines))


def plot_mean_curves(curves: dict[str, list[list[float]]], path: Path, ylabel: str, title: str = "") -> None:
    """One line per label: the rolling mean of the step-wise mean over that label's curves."""
    plot_panels({title: curves}, path, ylabel)


def plot_panels(panels: dict[str, dict[str, list[list[float]]]], path: Path, ylabel: str) -> None:
    """Side-by-side panels (title → label → curves), each drawn as in ``plot_mean_curves``, on a
    shared y axis so the panels compare."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(panels), figsize=(8 if len(panels) == 1 else 4.5 * len(panels), 4),
                             sharey=True, squeeze=False)
    for ax, (title, curves) in zip(axes[0], panels.items()):
        for label, cs in curves.items():
            n = min(len(c) for c in cs)
            mean = [statistics.mean(c[i] for c in cs) for i in range(n)]
            ax.plot(range(1, n + 1), rolling_mean(mean, WINDOW), label=label)
        ax.set_xlabel("step")
        if title:
            ax.set_title(title)
        ax.grid(alpha=0.3)
        ax.legend()
    axes[0][0].set_ylabel(f"{ylabel} ({WINDOW}-step mean)")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=100)
    plt.close(fig)
