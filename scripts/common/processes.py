"""Work the scripts run in a process of its own: a benchmark's rows in a fresh interpreter of the
same script (``in_own_process``, and ``hand_back``, the child's side), and an experiment's
``swarm-node`` run (``run_cli``)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from common import ROOT


def in_own_process(script: str | Path, argv: list[str]) -> dict | None:
    """Run ``script argv --json-out FILE`` in a fresh interpreter and return FILE's JSON, or None
    if it failed (said on stderr: the caller reports the rows it has and says which are missing).

    py-libp2p and hivemind cannot be imported in one process (both register the protobuf symbol
    ``crypto.pb.KeyType``), so a benchmark that compares them measures its libp2p rows this way,
    within the same invocation. The child's output (its progress lines) goes to ours."""
    with tempfile.TemporaryDirectory(prefix="bench-") as tmp:
        out = Path(tmp) / "rows.json"
        code = subprocess.run([sys.executable, str(script), *argv, "--json-out", str(out)]).returncode
        if code == 0:
            return json.loads(out.read_text())
    print(f"{Path(script).name} {' '.join(argv)}: exit status {code}; those rows are missing", file=sys.stderr)
    return None


def hand_back(json_out: Path, rows: dict) -> None:
    """The child's side of ``in_own_process``: its rows, as JSON into the ``--json-out`` file."""
    json_out.write_text(json.dumps(rows))


def run_cli(args: list[str], run_dir: Path, done_file: str, rerun: bool = False) -> Path:
    """Run ``swarm-node ARGS --run.dir RUN_DIR`` (one torch thread, output to the log) unless
    ``RUN_DIR/DONE_FILE`` exists already, which a finished run leaves behind."""
    if (run_dir / done_file).exists() and not rerun:
        print(f"{run_dir}: done already (--rerun to redo)", flush=True)
        return run_dir
    cmd = [sys.executable, "-m", "swarm_node.node.cli", *args, "--run.dir", str(run_dir), "--run.checkpoint_every", "0"]
    t0 = time.time()
    print(f"{run_dir.name}: swarm-node {' '.join(args)}", flush=True)
    subprocess.run(cmd, check=True, cwd=ROOT, env=dict(os.environ, OMP_NUM_THREADS="1"),
                   stdout=subprocess.DEVNULL)
    print(f"  {time.time() - t0:.0f} s", flush=True)
    return run_dir
