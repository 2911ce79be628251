"""What attacks do to an honest swarm: the same honest nodes, with and without an attacker.

    python scripts/bench_attacks.py                                   # every scenario, 25 steps
    python scripts/bench_attacks.py --scenarios flood zero_advantage --steps 20
    python scripts/bench_attacks.py --clean-runs 2 --nodes 3 --round-seconds 3 --out docs/results
    python scripts/bench_attacks.py --scenarios crafted_informative --flags swarm.select=informative --tag informative

Each scenario is one ``swarm-node sim`` run (node/sim/runner.py, the code path users run): a bootstrap
peer and ``--nodes`` honest ``swarm-node join`` processes over the real hivemind transport on
127.0.0.1, each with its own p2p daemon, identity and seed (node i: seed + i), the embedded default
model and the default config (8 prompt groups a step, 4 of them from peers, 8 completions of at
most 16 tokens), ``--steps`` steps, ``--round-seconds`` rounds. An attack scenario adds one
``swarm-node adversary`` process (a ``[[malicious]]`` fault) that runs the scenario's attacks
every round (node/sim/adversary/: what each does, and where honest nodes count it). The clean
baseline is the same run without it (``--clean-runs`` times, to show run-to-run noise: rounds are
wall-clock, so two runs of one seed differ).

From every honest node's run folder (metrics.jsonl, status.json, node.log) and, while it runs,
/proc (resident memory of the node process and of its p2p daemon), it takes:

- honest groups received per step: peer groups admitted into the node's pool from the other
  honest nodes (``groups_in_by_peer`` of status.json without the attacker's keys, when the node
  reports it; otherwise ``groups_in`` minus the groups the attacker published in the rounds the
  node polled, a lower bound, marked ``≥``), divided by the steps trained; and the share of the
  groups the other honest nodes published in those rounds that arrived (``delivered``);
- honest groups trained on per step (``external_by_peer`` of each step's record, attacker keys
  left out): at most J = 4, and shared with any attacker batch that is admitted by design;
- steps trained, rounds skipped, NaN steps (a record whose loss, gradient norm, ρ or LR is not
  finite) and updates skipped for a non-finite gradient (node.log);
- ρ (ESS / rows that carry gradient) and the LR factor, mean over the steps; reward (mean total
  reward of the node's own completions);
- peak resident memory (VmHWM of the node's process; and of its p2pd), and its growth over the
  run (VmRSS, last third of the samples vs the middle third);
- rejections by reason, and the transport's counters (``fetch_failures``, ``refused_requests``,
  ``backed_off``), the pool (``dropped_full``, ``pool_bytes``) and ``external_too_long``.

Targets (issue 9): honest groups delivered ≥ 90% of the clean run's share, no NaN step, ρ and
the LR factor unmoved by zero-gradient and foreign-tokenizer rows (within the clean runs' spread,
at least 0.02), resident memory bounded (peak at most the pool's byte cap, 256 MiB, plus 128 MiB
for envelopes being decoded above the clean run's, and levelling off: growing over the run, last
third vs middle third, at most 64 MiB more than a clean node does), every honest node trains every step
at a pace (steps over rounds spanned) at least 90% of the clean run's (not in issue 9's list: an
attack that costs CPU shows there), and each attack counted where it should be (the adversary's DHT writes read back: kept by no replica).
A batch admitted by design (``zero_advantage``, ``foreign_logprob_gap``, ``crafted_informative``) may
be trained on, but never more of one step than its sender's share, ⌈J × swarm.max_sender_share⌉,
whatever ``swarm.select`` prefers (``within_share``; ``--flags swarm.select=informative`` runs the
whole suite, clean runs too, under that rule).

Writes ``attacks[-TAG].json`` and ``attacks[-TAG].md`` into ``--out``; run folders go under
``--runs`` (deleted and rewritten per scenario).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import sys
import time
from pathlib import Path
from typing import Callable

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "scripts"))
os.environ.setdefault("HIVEMIND_LOGLEVEL", "WARNING")

from attack_suite.report import fmt, reasons, write  # noqa: E402
from attack_suite.runner import run_scenario  # noqa: E402
from attack_suite.scenarios import SCENARIOS, Setup, sender_cap_of  # noqa: E402
from attack_suite.verdict import clean_baseline, verdict  # noqa: E402
from common.report import command_line, environment, write_json  # noqa: E402


async def run_all(names: list[str], setup: Setup, runs: Path, clean_runs: int,
                  say: Callable[[str], None] = print) -> dict:
    """The clean runs, then each scenario, one after the other (what finished so far kept in
    ``runs/partial.json``); then every scenario judged against the clean runs."""
    plan = [f"clean-{k + 1}" for k in range(clean_runs)] + names
    cleans, scenarios = [], []
    for n, name in enumerate(plan, 1):
        say(f"[{n}/{len(plan)}] {name}")
        attacks = () if name.startswith("clean") else SCENARIOS[name][0]
        res = await run_scenario(name, attacks, setup, runs / name, say)
        (cleans if not attacks else scenarios).append(res)
        h = res["honest"]
        say(f"  {name}: done in {res['wall_s']:.0f} s: steps {h['steps']}, honest received/step "
            f"{fmt(h['honest_received_per_step'])}, ρ {fmt(h['rho_mean'], '.3f')}, max RSS {h['max_rss_mb']:.0f} MB, "
            f"rejected {reasons(h['rejected'])}")
        write_json(runs / "partial.json", {"clean_runs": cleans, "scenarios": scenarios}, end="")
    base = clean_baseline(cleans)
    for s in scenarios:
        s["verdict"] = verdict(s, base, setup)
    return {"clean_runs": cleans, "clean": base, "scenarios": scenarios}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--scenarios", nargs="+", default=list(SCENARIOS), choices=list(SCENARIOS), metavar="NAME",
                    help=f"attack scenarios (default: all): {', '.join(SCENARIOS)}")
    ap.add_argument("--steps", type=int, default=25, help="steps each honest node trains")
    ap.add_argument("--nodes", type=int, default=3, help="honest nodes")
    ap.add_argument("--round-seconds", type=float, default=Setup.round_seconds)
    ap.add_argument("--clean-runs", type=int, default=2, help="runs without the attacker (the baseline; 2 show the noise)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--model", default="default", help="model for every node (default: the embedded default)")
    ap.add_argument("--flags", nargs="+", default=[], metavar="SECTION.KEY=VALUE",
                    help="config flags for every process, clean runs included (e.g. swarm.select=informative)")
    ap.add_argument("--runs", type=Path, default=ROOT / "runs" / "bench_attacks", help="run folders (rewritten)")
    ap.add_argument("--out", type=Path, default=ROOT / "docs" / "results")
    ap.add_argument("--tag", default="", help="suffix of the output file names")
    ap.add_argument("--rerender", action="store_true",
                    help="run nothing: judge the targets again and rewrite the report from --out's attacks[-TAG].json")
    args = ap.parse_args()
    stem = "attacks" + (f"-{args.tag}" if args.tag else "")
    if args.rerender:
        return rerender(args.out / f"{stem}.json")
    if args.clean_runs < 1:
        ap.error("--clean-runs must be at least 1: the attacks are measured against it")
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    flags = dict(f.split("=", 1) for f in args.flags if "=" in f)
    if len(flags) != len(args.flags):
        ap.error("--flags takes SECTION.KEY=VALUE pairs")
    setup = Setup(nodes=args.nodes, steps=args.steps, round_seconds=args.round_seconds, seed=args.seed,
                  model=args.model, flags=flags)
    t0 = time.time()
    try:
        result = asyncio.run(run_all(args.scenarios, setup, args.runs, args.clean_runs, lambda s: print(s, flush=True)))
    except KeyboardInterrupt:
        print(f"interrupted: nothing written to {args.out}; what finished is in {args.runs / 'partial.json'}",
              file=sys.stderr)
        return 130
    result.update(benchmark="attacks against an honest swarm over hivemind, with and without the attacker",
                  command=command_line(),
                  setup={"nodes": setup.nodes, "steps": setup.steps, "round_seconds": setup.round_seconds,
                         "seed": setup.seed, "model": setup.model, "flags": setup.flags},
                  wall_s=time.time() - t0, **environment())
    write(args.out / f"{stem}.json", result)
    return 0


def rerender(path: Path) -> int:
    """The targets judged again (this script's current rules) on a run's measurements."""
    result = json.loads(path.read_text())
    s = result["setup"]
    setup = Setup(nodes=s["nodes"], steps=s["steps"], round_seconds=s["round_seconds"], seed=s["seed"],
                  model=s["model"], flags=s.get("flags") or {})
    result["clean"] = clean_baseline(result["clean_runs"])
    for sc in result["scenarios"]:
        sc["verdict"] = verdict(sc, result["clean"], setup)
    write(path, result)
    return 0


if __name__ == "__main__":
    sys.exit(main())
