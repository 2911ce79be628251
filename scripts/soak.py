"""A swarm left joined under churn and attack: do memory, descriptors, threads, disk and delivery
stay bounded, and does every killed node resume with nothing lost?

    python scripts/soak.py                       # 60 minutes (about 62 min of wall time), the report in docs/results
    python scripts/soak.py --minutes 5 --out /tmp/soak   # the short version

Six nodes over hivemind on the embedded default model, as one ``swarm-node sim`` run: node0 a
learner publishing its weights, node1 and node2 its workers following them, node3..node5 full
nodes sharing rollouts beside them (the swarm as most users join it). The schedule
(soak_suite/schedule.py, scaled to ``--minutes``): a node killed with SIGKILL and restarted with
``--resume`` every 5 minutes, a 2-minute partition, the bootstrap peer stopped for 5 minutes,
and attack phases from the adversary registry between clean phases. Every 10 s each process is
sampled (resident memory, open descriptors, threads, its p2p daemons), each node's run folder
measured and its status read. Writes ``soak.md``, ``soak.json`` and ``soak.png`` into ``--out``;
the sim folder (``--runs``) keeps every node's folder, ``samples.jsonl`` and ``faults.jsonl``.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from pathlib import Path

import common  # noqa: F401  (puts the repository root on sys.path)
from common.report import machine, write_json, write_markdown
from soak_suite.report import markdown, plot
from soak_suite.run import judge_folder, run_soak, sim_overrides
from soak_suite.schedule import DEFAULT_ATTACK_SETS, DOWN_SECONDS, ENVELOPE, attack_sets, make_schedule

ROOT = Path(__file__).resolve().parents[1]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--minutes", type=float, default=60.0, help="how long the swarm runs (the schedule scales with it)")
    ap.add_argument("--nodes", type=int, default=6)
    ap.add_argument("--workers", type=int, default=2, help="node1..nodeN follow node0's weights; the rest are full nodes")
    ap.add_argument("--attacks", nargs="+", default=list(DEFAULT_ATTACK_SETS), metavar="NAME",
                    help=f"one attack phase each, from the adversary registry ({ENVELOPE}: its envelope attacks "
                         f"together); a name the registry does not hold is skipped, and the report says so")
    ap.add_argument("--model", default="default", help="every node's model (default: the embedded default)")
    ap.add_argument("--round-seconds", type=float, default=6.0, help="six nodes on two cores need about 4 s a step")
    ap.add_argument("--checkpoint-every", type=int, default=5, help="steps: a kill redoes at most this many")
    ap.add_argument("--every", type=float, default=10.0, help="seconds between samples")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--flags", nargs="+", default=[], metavar="SECTION.KEY=VALUE", help="more config for every node")
    ap.add_argument("--runs", type=Path, default=ROOT / "runs" / "soak", help="the sim folder (rewritten)")
    ap.add_argument("--out", type=Path, default=ROOT / "docs" / "results")
    ap.add_argument("--rejudge", action="store_true", help="run nothing: judge the soak already in --runs again "
                                                           "and rewrite the report")
    args = ap.parse_args(argv)
    flags = dict(f.split("=", 1) for f in args.flags if "=" in f)
    if len(flags) != len(args.flags):
        ap.error("--flags takes SECTION.KEY=VALUE pairs")
    if not 1 <= args.workers < args.nodes:
        ap.error("--workers: 1 to nodes - 1")

    from swarm_node.node.observe.logs import setup_logging
    from swarm_node.node.sim.adversary import ATTACKS, DEFAULT_ATTACKS

    setup_logging()
    sets, skipped = attack_sets(args.attacks, ATTACKS, DEFAULT_ATTACKS)
    for name in skipped:
        print(f"soak: attack {name!r} is not in the adversary registry (node/sim/adversary/registry.py): skipped")
    sched = make_schedule(args.minutes, args.nodes, args.workers, sets, skipped)
    overrides = sim_overrides(args.model, args.round_seconds, args.checkpoint_every, flags)
    try:
        res = judge_folder(args.runs.resolve()) if args.rejudge else \
            asyncio.run(run_soak(sched, args.runs, args.nodes, args.workers, overrides, args.every, args.seed))
    except KeyboardInterrupt:
        print("soak: interrupted; no report written", file=sys.stderr)
        return 130
    samples = res.pop("samples")
    result = {"machine": machine(), "minutes": args.minutes, "nodes": args.nodes,
              "workers": args.workers, "model": "the embedded default model" if args.model == "default" else args.model,
              "layout": f"node0 a learner, node1..node{args.workers} its workers, "
                        f"node{args.workers + 1}..node{args.nodes - 1} full nodes",
              "every_s": args.every, "down_s": DOWN_SECONDS, "runs": str(args.runs), **res}
    write_json(args.out / "soak.json", result)
    lines = markdown(result, "soak")
    write_markdown(args.out / "soak.md", lines)
    plot(result, samples, args.out / "soak.png")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
