"""What the benchmark scripts share: common flags and set-up, the report writer (the
oversubscription note, the JSON and markdown files), and running rows in a process of their own."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def add_common_args(ap: argparse.ArgumentParser) -> None:
    ap.add_argument("--model", default=None, help="model path or hub id (default: the embedded default model)")
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--prompts", type=int, default=8)
    ap.add_argument("--generations", type=int, default=8)
    ap.add_argument("--max-new-tokens", type=int, default=16)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--repeats", type=int, default=30)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--threads", type=int, default=1, help="torch threads (0 = torch's default)")
    ap.add_argument("--out", type=Path, default=ROOT / "docs" / "results")
    ap.add_argument("--tag", default="", help="suffix of the output file names")


def environment() -> dict:
    """Where a benchmark ran, for its JSON record."""
    import os
    import platform

    import torch

    return {"python": platform.python_version(), "torch": torch.__version__,
            "machine": f"{platform.machine()}, {os.cpu_count()} CPUs",
            "load_avg_1m": os.getloadavg()[0] if hasattr(os, "getloadavg") else None}


def setup(args: argparse.Namespace) -> None:
    """Apply --threads and resolve --model (building the default model if needed)."""
    import torch

    if args.threads:
        torch.set_num_threads(args.threads)
    if args.model is None:
        from policies.default_model import ensure_default_model

        args.model = str(ensure_default_model())


def in_own_process(script: str | Path, argv: list[str]) -> dict | None:
    """Run ``script argv --json-out FILE`` in a fresh interpreter and return FILE's JSON, or None
    if it failed (said on stderr: the caller reports the rows it has and says which are missing).

    py-libp2p and hivemind cannot be imported in one process (both register the protobuf symbol
    ``crypto.pb.KeyType``), so a benchmark that compares them measures its libp2p rows this way,
    within the same invocation. The child's output (its progress lines) goes to ours."""
    import subprocess
    import sys
    import tempfile

    with tempfile.TemporaryDirectory(prefix="bench-") as tmp:
        out = Path(tmp) / "rows.json"
        code = subprocess.run([sys.executable, str(script), *argv, "--json-out", str(out)]).returncode
        if code == 0:
            return json.loads(out.read_text())
    print(f"{Path(script).name} {' '.join(argv)}: exit status {code}; those rows are missing", file=sys.stderr)
    return None


def write_report(out_dir: Path, stem: str, result: dict, md: list[str], times: dict[str, list[float]]) -> str:
    """Append the spread note when round times vary > 3x, write ``stem``.json/.md, return the table."""
    spread = max(max(v) for v in times.values()) / min(min(v) for v in times.values())
    result["max_over_min_time"] = spread
    if spread > 3:
        md += ["", f"Note: round times vary {spread:.0f}x between the fastest and the slowest round: "
                   "the CPU was oversubscribed (other jobs competing with torch's threads) for part of "
                   "the run, so the medians mix two regimes; the paired ratios compare rounds run "
                   "back to back. `--threads 1` avoids the stalls."]
    table = "\n".join(md) + "\n"
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / f"{stem}.json").write_text(json.dumps(result, indent=2) + "\n")
    (out_dir / f"{stem}.md").write_text(table)
    print(table)
    return table
