"""A Sybil flood of one honest peer's own index shard, with ground keys, over the real hivemind DHT.

    python scripts/bench_shard_flood.py                       # 2 runs: 8 clean, 15 flood, 6 after
    python scripts/bench_shard_flood.py --runs 1 --flood 10 --keys 40

Each run is one swarm on 127.0.0.1 (scripts/attack_suite/shard_flood.py says what runs): a
bootstrap peer, two honest hivemind transports doing what the exchange does with them (the
victim and the receiver) and a Sybil DHT node with ``--keys`` keys ground into the victim's
two-hex-digit shard, each storing one owner-signed entry a round at levels 0-2 during the flood
phase. Phases follow one another in the same swarm: ``clean`` (the control: no flood), ``flood``,
``after`` (the Sybil stopped). Per phase and direction it reports the share of rounds whose
envelope arrived within the window (victim -> receiver, receiver -> victim), the share of rounds
in which each heard the other's heartbeat, and each one's swarm-size estimate (min-max).
Target (issue 28): delivery in the flood phase ≥ 90% of the clean phase's, both directions.

Writes ``attacks-shard_flood.json`` and ``attacks-shard_flood.md`` into ``--out``.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "scripts"))

from attack_suite.shard_flood import Phase, run_shard_flood  # noqa: E402
from common.report import command_line, environment, machine, write_json, write_markdown  # noqa: E402


def table(runs: list[dict]) -> list[str]:
    lines = ["| run | phase | rounds | victim → receiver | receiver → victim | heartbeats heard (receiver / victim) "
             "| estimate: receiver | estimate: victim |", "|---|---|---:|---:|---:|---:|---:|---:|"]
    for i, res in enumerate(runs, 1):
        clean = res["phases"].get("clean")
        for name, row in res["phases"].items():
            cells = []
            for d in ("victim_to_receiver", "receiver_to_victim"):
                cell = f"{row[d]:.0%}"
                if clean and name != "clean" and clean[d]:
                    cell += f" ({row[d] / clean[d]:.2f} of clean)"
                cells.append(cell)
            est = [f"{e[0]}–{e[1]}" if e else "-" for e in (row["receiver_estimate"], row["victim_estimate"])]
            lines.append(f"| {i} | {name} | {row['rounds']} | {cells[0]} | {cells[1]} | "
                         f"{row['receiver_heard']:.0%} / {row['victim_heard']:.0%} | {est[0]} | {est[1]} |")
    return lines


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--runs", type=int, default=2)
    ap.add_argument("--keys", type=int, default=160, help="keys ground into the victim's shard")
    ap.add_argument("--clean", type=int, default=8, help="rounds without the flood (the control)")
    ap.add_argument("--flood", type=int, default=15, help="rounds of the flood")
    ap.add_argument("--after", type=int, default=6, help="rounds after the flood stopped")
    ap.add_argument("--round-seconds", type=float, default=3.0)
    ap.add_argument("--out", type=Path, default=ROOT / "docs" / "results")
    args = ap.parse_args()
    phases = [Phase("clean", args.clean, False), Phase("flood", args.flood, True)]
    if args.after:
        phases.append(Phase("after", args.after, False))
    t0, runs = time.time(), []
    for i in range(args.runs):
        print(f"run {i + 1}/{args.runs}", flush=True)
        runs.append(asyncio.run(run_shard_flood(phases, args.keys, args.round_seconds,
                                                say=lambda s: print("  " + s, flush=True))))
        print("\n".join(table(runs[-1:])), flush=True)
    res = runs[0]
    grind = ", ".join(f"{r['grind_s']:.1f}" for r in runs)
    md = ["# The shard flood: ground keys in one honest peer's shard", "", f"`{command_line()}`", "",
          f"{args.keys} keys ground into the victim's shard (its first two hex digits; "
          f"{grind} s of key generation), one owner-signed entry per key "
          f"and level 0-2 a flood round ({3 * args.keys} signatures a round; kept by the replicas: "
          f"{res['sybil_entries'].get('kept', 0)}, refused: {res['sybil_entries'].get('refused', 0)} in run 1), "
          f"{args.round_seconds:g} s rounds, want = 2. Delivery: the share of a phase's rounds whose envelope "
          f"arrived within the window.", "", *table(runs), "",
          f"{machine()}; {time.time() - t0:.0f} s in all."]
    write_json(args.out / "attacks-shard_flood.json", {"command": command_line(), "environment": environment(),
                                                       "runs": runs})
    print(write_markdown(args.out / "attacks-shard_flood.md", md))


if __name__ == "__main__":
    main()
