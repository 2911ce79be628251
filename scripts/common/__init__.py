"""What the benchmark and experiment scripts share (scripts/bench_*.py, scripts/exp_*.py).

- ``proc``: every /proc reader (a process's resident memory and peak, its CPU seconds, its
  threads, the process table, the machine's busy and total CPU time, this process's peak reset),
  each a pure parser of the file's text beside the function that reads it;
- ``report``: the result files (JSON, markdown, the pair), the command line and machine a report
  quotes, the oversubscription note of a benchmark, an experiment's report that keeps its
  hand-written reading;
- ``flags``: the flags and set-up of the torch benchmarks (bench_generation, bench_learner);
- ``processes``: work run in a process of its own (a benchmark's rows in a fresh interpreter, an
  experiment's ``swarm-node`` run);
- ``curves``: the correctness-curve statistics the experiment reports use, and their plots.

Scripts run as ``python scripts/NAME.py`` have scripts/ on sys.path, not the repository root:
importing this package puts the root there, so ``swarm_node`` (``swarm_node.node`` ...) imports after it.
"""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
