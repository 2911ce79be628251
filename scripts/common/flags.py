"""The flags and set-up the torch benchmarks share (scripts/bench_generation.py, bench_learner.py):
model, device, batch shape, repeats, threads and where the report goes."""

from __future__ import annotations

import argparse
from pathlib import Path

from common import ROOT


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


def setup(args: argparse.Namespace) -> None:
    """Apply --threads and resolve --model (building the default model if needed)."""
    import torch

    if args.threads:
        torch.set_num_threads(args.threads)
    if args.model is None:
        from swarm_node.policies.default_model import ensure_default_model

        args.model = str(ensure_default_model())
