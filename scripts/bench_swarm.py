"""How long until a published rollout batch is usable by its peers, and how fast can a node admit?

    python scripts/bench_swarm.py                         # N = 2 4 8 peers, 30 trials, poll 0.05 s
    python scripts/bench_swarm.py --peers 2 4 8 --trials 30 --poll 0.05 --verify-n 2000 --out docs/results
    python scripts/bench_swarm.py --poll 0.25 --tag poll-default     # the node's default poll interval
    python scripts/bench_swarm.py --transports memory libp2p --tag libp2p   # some transports only

The batch is what a node publishes each round with the default config: ``local_groups`` (4) task
groups x ``num_generations`` (8) completions = 32 ``RolloutRecord``s of at most 16 new tokens,
generated for real by the embedded default model the way the trainer does it
(``round_task_ids`` -> ``generate_rollouts`` -> ``to_records``, temperature 1, top-p 1).

1. Publish-to-available latency, on loopback. One publisher and N receivers (``--peers``), each a
   ``SwarmExchange`` with its own Ed25519 identity and transport, all in one Python process and
   event loop. A trial is one fresh signed envelope: the clock starts just before the publisher
   signs it (``make_envelope``: msgpack encode + Ed25519 sign, then ``transport.publish``, which is
   exactly what ``SwarmExchange.publish`` does) and stops, per receiver, when that receiver's
   ``SwarmExchange.admit`` has accepted it: fetched, signature and replay checked, decoded,
   schema-checked, task ids regenerated, tokens and texts checked with the real tokenizer.
   Receivers run the node's receive loop (``transport.poll(exchange.window())``, i.e. the
   ``max_round_lag + 1`` = 5 rounds the node polls, then admit, then sleep ``--poll`` s, jittered
   +-50% so that receivers sharing one event loop do not phase-lock), timestamping each
   admission. Reported per N: median and p95 over trials of the time until *all* N receivers
   have admitted the batch, and the median per-receiver latency. Trial k+1 is published only once
   every receiver has trial k, in a round of its own (1 s rounds, the demo's), as a node publishes
   one batch a round: the exchange admits one batch per sender and round, and the transports
   fetch or hand over one body per publisher and round (hivemind tries a publisher once a round,
   the libp2p inbox hands over at most two). It goes out after a random gap from the round's
   start (up to 3 receive cycles, at most half a round), so the publication falls at a random
   point of each receiver's poll cycle; the first ``--warmup`` trials (connection set-up) are not
   counted. Receivers poll, they are not pushed: polling alone adds ~poll/2 on average (13/24 poll
   with the jitter; the node's default ``swarm.poll_seconds`` is 0.25 s).

   Three transports, side by side for each N:

   - ``hivemind``: real hivemind DHT nodes, each with its own p2pd daemon, on 127.0.0.1 (one
     bootstrap node + the publisher + N receivers). The publisher stores a small index record in
     the DHT; a receiver finds it with one DHT get_many over the polled rounds and fetches the body over a
     libp2p stream from the publisher.
   - ``libp2p``: py-libp2p hosts (``Libp2pTransport``), each in a trio thread of its own, no
     daemon: one bootstrap host that joins no topic (as ``swarm-node bootstrap --transport
     libp2p``) + the publisher + N receivers, which find each other through it by peer exchange.
     The envelope is pushed over gossipsub; every node's topic validator runs the node's admission
     checks (``SwarmExchange.gate``, in a worker thread) before it forwards or delivers it, and the
     receiver's poll takes it from its inbox and admits it as over hivemind. Timing starts once
     every node has min(N, D_low = 4) peers in its gossipsub mesh (waited for, not slept). py-libp2p
     and hivemind cannot be imported in one process, so these rows run in a child process of
     the same invocation (this script with ``--transports libp2p --json-out FILE``, one per N,
     interleaved with the others), which regenerates the same batch from ``--seed``.
   - ``memory``: the in-process ``MemoryTransport`` through a shared ``MemoryHub``: the same
     exchange code, poll loop and admission, no network. ``hivemind / memory`` and
     ``libp2p / memory`` (and the differences in ms) isolate what each network stack costs.

2. Verification throughput: envelopes per second one node admits, over ``--verify-n`` distinct
   envelopes of the batch (each freshly signed, own seq and nonce), timed in 10 chunks:
   (a) ``Verifier.verify`` alone on pre-parsed envelopes (peer-id check, Ed25519 verify, clock and
   replay bookkeeping); (b) the full ``SwarmExchange.admit`` on the raw bytes (frame parse +
   verify + msgpack decode + schema checks + task-id regeneration + token/text checks).

Writes ``bench_swarm[-TAG].json`` and ``bench_swarm[-TAG].md`` into ``--out`` and prints the table.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
os.environ.setdefault("HIVEMIND_LOGLEVEL", "WARNING")  # hivemind logs every daemon start at INFO

from common.processes import hand_back, in_own_process  # noqa: E402
from common.report import command_line, environment, write_bench_report  # noqa: E402
from swarm_node.policies.policy import Policy  # noqa: E402
from swarm_node.protocol.messages import RolloutRecord  # noqa: E402
from swarm_bench.latency import latency  # noqa: E402
from swarm_bench.nodes import NODE_POLL_SECONDS, ROUND_SECONDS, realistic_batch  # noqa: E402
from swarm_bench.report import markdown, ms  # noqa: E402
from swarm_bench.throughput import verification  # noqa: E402

TRANSPORTS = ("memory", "hivemind", "libp2p")


async def run_latency(policy: Policy, records: list[RolloutRecord], batch: dict,
                      args: argparse.Namespace) -> list[dict]:
    """The latency rows, N by N, the transports interleaved; libp2p's each from a child process."""
    runs = []
    for n in args.peers:
        for kind in args.transports:  # interleaved so load drift hits every transport alike
            t0 = time.perf_counter()
            if kind == "libp2p" and args.json_out is None:
                # A child process of its own, same flags (argparse keeps an option's last value).
                child = await asyncio.to_thread(in_own_process, __file__,
                                                [*sys.argv[1:], "--transports", kind, "--peers", str(n)])
                if child is None:
                    continue  # the report says it is missing
                if child["batch"] != batch:
                    raise SystemExit(f"the libp2p process generated another batch: {child['batch']} vs {batch}")
                runs += child["latency"]  # it printed its line
                continue
            runs.append(await latency(kind, n, policy, records, args))
            print(f"N={n} {kind}: median all {ms(runs[-1]['median_all_s'])} ms "
                  f"({time.perf_counter() - t0:.0f} s)", flush=True)
    return runs


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--peers", type=int, nargs="+", default=[2, 4, 8], help="receivers N")
    ap.add_argument("--trials", type=int, default=30, help="counted publications per N and transport")
    ap.add_argument("--warmup", type=int, default=2, help="uncounted first publications (connection set-up)")
    ap.add_argument("--poll", type=float, default=0.05, help="receivers' poll interval (s)")
    ap.add_argument("--max-round-lag", type=int, default=4, help="staleness window: receivers poll lag+1 rounds")
    ap.add_argument("--timeout", type=float, default=30.0, help="give up on a trial's missing receivers after (s)")
    ap.add_argument("--verify-n", type=int, default=2000, help="distinct envelopes for the throughput test")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--transports", nargs="+", choices=TRANSPORTS, default=list(TRANSPORTS),
                    help="latency rows, in this order for each N (libp2p's in a child process)")
    ap.add_argument("--out", type=Path, default=ROOT / "docs" / "results")
    ap.add_argument("--tag", default="", help="suffix of the output file names")
    ap.add_argument("--json-out", type=Path, default=None,
                    help="only the latency rows, as JSON into this file, no throughput test nor report "
                         "(how the libp2p rows run in a process of their own)")
    args = ap.parse_args()

    policy, records, batch = realistic_batch(args.seed)
    random.seed(args.seed)
    runs = asyncio.run(run_latency(policy, records, batch, args))
    if args.json_out is not None:
        hand_back(args.json_out, {"batch": batch, "latency": runs})
        return 0
    verify = verification(policy, records, args.verify_n)
    result = {
        "benchmark": "swarm: publish-to-available latency (memory, hivemind, libp2p) and admission throughput",
        "command": command_line(),
        "batch": batch, "envelope_bytes": verify["envelope_bytes"],
        "peers": args.peers, "trials": args.trials, "warmup": args.warmup, "poll_s": args.poll,
        "node_default_poll_s": NODE_POLL_SECONDS, "max_round_lag": args.max_round_lag,
        "round_seconds": ROUND_SECONDS, "transports": args.transports,
        "processes": "memory and hivemind rows in this process; libp2p rows in a child process per N",
        "latency": runs, "verification": verify,
        **environment(),
    }
    # The spread note is about CPU oversubscription: judge it on the admission chunks, CPU-bound
    # and equal in work (latencies vary with the poll phase by design).
    times = {"admit_chunk": verify["admit"]["chunk_s"]}
    write_bench_report(args.out, "bench_swarm" + (f"-{args.tag}" if args.tag else ""), result, markdown(result), times)
    return 0 if len(runs) == len(args.peers) * len(args.transports) else 1


if __name__ == "__main__":
    sys.exit(main())
