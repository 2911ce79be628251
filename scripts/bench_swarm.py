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
import functools
import json
import os
import random
import statistics
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
os.environ.setdefault("HIVEMIND_LOGLEVEL", "WARNING")  # hivemind logs every daemon start at INFO

import numpy as np  # noqa: E402
import torch  # noqa: E402

from node.clock import RoundClock  # noqa: E402
from node.run.config import NodeConfig  # noqa: E402
from node.run.rollouts import generate_rollouts, round_task_ids, to_records  # noqa: E402
from node.swarm.exchange import SwarmExchange  # noqa: E402
from node.transport.base import Delivery, Transport  # noqa: E402
from node.transport.memory import MemoryHub, MemoryTransport  # noqa: E402
from policies.default_model import ensure_default_model  # noqa: E402
from policies.policy import Policy, SamplingParams  # noqa: E402
from protocol.identity import Identity  # noqa: E402
from protocol.messages import RolloutRecord  # noqa: E402
from protocol.signing import Verifier, VerifyResult, envelope_from_bytes  # noqa: E402
from rewards.scoring import RewardConfig  # noqa: E402
from bench_common import environment, in_own_process, write_report  # noqa: E402

SWARM = "bench"
ROUND_SECONDS = 1.0  # the demo's round (docs/examples/swarm_demo.toml): one trial a round
NODE_POLL_SECONDS = NodeConfig().swarm.poll_seconds  # quoted in the report (0.25 s)
LOOPBACK = dict(host_maddrs=["/ip4/127.0.0.1/tcp/0"], use_relay=False, nat_port_map=False)
TRANSPORTS = ("memory", "hivemind", "libp2p")
MESH_TIMEOUT_S = 60.0  # libp2p: gossipsub meshes form within a few heartbeats (1 s each)
CHUNKS = 10


# -- the batch -----------------------------------------------------------------------------------
def realistic_batch(seed: int) -> tuple[Policy, list[RolloutRecord], dict]:
    """One round's records as the trainer publishes them with the default config."""
    cfg = NodeConfig(swarm={"transport": "hivemind"})  # in a swarm a node generates I = 8 - J groups
    policy = Policy.load(str(ensure_default_model()))
    groups = cfg.local_groups
    g = cfg.generation.num_generations + (1 if cfg.learner.baseline == "median" else 0)
    params = SamplingParams(max_new_tokens=cfg.generation.max_completion_length,
                            temperature=cfg.generation.temperature, top_p=cfg.generation.top_p,
                            top_k=cfg.generation.top_k)
    torch.manual_seed(seed)
    task_ids = round_task_ids(seed, 0, groups, cfg.tasks.families, cfg.tasks.difficulties)
    records = to_records(generate_rollouts(policy, task_ids, g, params, 0, RewardConfig()))
    info = {"groups": groups, "completions_per_group": g, "records": len(records),
            "max_new_tokens": params.max_new_tokens,
            "completion_tokens": sum(len(r.completion_ids) for r in records)}
    return policy, records, info


def machine_jiffies() -> tuple[int, int] | None:
    """(busy, total) CPU time of the whole machine from /proc/stat (Linux), else None."""
    try:
        with open("/proc/stat") as f:
            user, nice, system, idle, iowait, irq, softirq, steal = map(int, f.readline().split()[1:9])
    except (OSError, ValueError):
        return None
    total = user + nice + system + idle + iowait + irq + softirq + steal
    return total - idle - iowait, total


def busy_share(before: tuple[int, int] | None) -> float | None:
    """Share of all cores busy since ``before`` (every process: this one, the p2pds, the rest)."""
    after = machine_jiffies()
    if before is None or after is None or after[1] == before[1]:
        return None
    return (after[0] - before[0]) / (after[1] - before[1])


def make_exchange(transport: Transport, identity: Identity, policy: Policy, clock: RoundClock,
                  poll: float, max_round_lag: int) -> SwarmExchange:
    """An exchange configured as ``node.run.trainer`` configures it."""
    tok = policy.tokenizer
    vocab = min(len(tok), policy.model.get_input_embeddings().num_embeddings)
    return SwarmExchange(transport, identity, clock, tokenizer_fingerprint=policy.tokenizer_fingerprint,
                         model_fingerprint=policy.model_fingerprint, vocab_size=vocab,
                         decode_text=lambda ids: tok.decode(list(ids), skip_special_tokens=True),
                         max_round_lag=max_round_lag, poll_seconds=poll)


# -- latency ---------------------------------------------------------------------------------------
@dataclass
class Publication:
    """One trial: the envelope, when publishing began, and when each receiver admitted it."""

    data: bytes
    t0: float
    n: int
    arrivals: dict[int, float] = field(default_factory=dict)
    done: asyncio.Event = field(default_factory=asyncio.Event)
    publish_s: float = float("nan")  # until transport.publish returned

    def arrive(self, idx: int, t: float) -> None:
        self.arrivals.setdefault(idx, t - self.t0)
        if len(self.arrivals) == self.n:
            self.done.set()


@dataclass
class SwarmRun:
    """Shared state of one swarm: the trial in flight and what the receivers observed."""

    current: Publication | None = None
    empty_poll_s: list[float] = field(default_factory=list)  # duration of polls that found nothing
    poll_errors: int = 0


async def receive(idx: int, ex: SwarmExchange, run: SwarmRun, poll: float) -> None:
    """The node's receive loop (``SwarmExchange.poll_once`` + sleep), timestamping admissions.

    The sleep is jittered, uniform in [poll/2, 3 poll/2]: separate nodes poll at independent
    phases, but nodes sharing one event loop with exact intervals phase-lock (seen over hivemind:
    two receivers' polls starting within ~2 ms of each other for seconds on end; over memory they
    start together and stay together), which would make "all N" look like "one peer". Mean
    interval unchanged; the mean wait for the next poll becomes 13/24 poll instead of poll/2.
    """
    while True:
        t = time.perf_counter()
        try:
            deliveries = await ex.transport.poll(ex.window())
        except Exception:  # noqa: BLE001 - as the node does: count and keep polling
            run.poll_errors += 1
            deliveries = []
        for d in deliveries:
            if ex.admit(d) and run.current is not None and d.data == run.current.data:
                run.current.arrive(idx, time.perf_counter())
        if not deliveries:
            run.empty_poll_s.append(time.perf_counter() - t)
        await asyncio.sleep(poll * random.uniform(0.5, 1.5))


async def publish_trial(pub: SwarmExchange, run: SwarmRun, records: list[RolloutRecord], n: int,
                        gap: float, timeout: float) -> Publication:
    """Sign and publish a fresh envelope ``gap`` s into the next round, then wait until all ``n``
    receivers admitted it. The first half of a round at most: with --max-round-lag 0 receivers stop
    polling a round the moment it ends, and a batch published just before would never arrive."""
    clock = pub.clock
    await clock.wait_for(clock.current() + 1)
    await asyncio.sleep(min(gap, clock.round_seconds / 2))
    t0 = time.perf_counter()
    r = clock.current()
    data = pub.make_envelope(r, 0, records)
    run.current = p = Publication(data, t0, n)
    await pub.transport.publish(r, data, (pub.max_round_lag + 2) * clock.round_seconds)
    p.publish_s = time.perf_counter() - t0
    try:
        await asyncio.wait_for(p.done.wait(), timeout)
    except asyncio.TimeoutError:
        pass  # counted as missing arrivals
    return p


async def make_transports(kind: str, ids: list[Identity]) -> tuple[list[Transport], Callable | None]:
    """A started transport of ``kind`` per identity, and what stops the bootstrap node (hivemind's
    DHT node, libp2p's host; None for memory)."""
    stop_boot = None
    if kind == "memory":
        hub = MemoryHub()
        ts = [MemoryTransport(swarm=SWARM, publisher=i.peer_id, hub=hub) for i in ids]
    elif kind == "hivemind":
        from node.transport.hivemind.records import bootstrap_validator
        from node.transport.hivemind.transport import HivemindTransport
        from node.transport.hivemind.daemon import start_dht_node, stop_dht_node

        boot = await start_dht_node(initial_peers=[], retries=0, record_validator=bootstrap_validator(), **LOOPBACK)
        stop_boot = functools.partial(stop_dht_node, boot)
        maddrs = [str(m) for m in await boot.p2p.get_visible_maddrs()]
        # round_seconds as the node passes it: the DHT record validator then checks these round keys;
        # each transport signs its records with its identity, as a node does.
        ts = [HivemindTransport(swarm=SWARM, publisher=i.peer_id, signer=i, initial_peers=maddrs, join_retries=0,
                                round_seconds=ROUND_SECONDS, **LOOPBACK) for i in ids]
    else:
        from node.transport.libp2p.transport import Libp2pTransport
        from node.transport.libp2p.host import Libp2pHost

        listen = LOOPBACK["host_maddrs"]
        boot = Libp2pHost(Identity.generate(), listen, [])  # joins no topic, as the libp2p bootstrap
        await boot.start()
        stop_boot = boot.close
        ts = [Libp2pTransport(swarm=SWARM, publisher=i.peer_id, identity=i, listen=listen, bootstrap=boot.addrs,
                              join_retries=0, round_seconds=ROUND_SECONDS) for i in ids]
    try:
        for t in ts:  # one after the other: each joiner finds the ones before it
            await t.start()
        if kind == "libp2p":
            await gossip_mesh_formed(ts)
    except BaseException:
        await close_all(ts, stop_boot)
        raise
    return ts, stop_boot


async def gossip_mesh_formed(ts: list[Transport]) -> None:
    """Until every libp2p node has min(N, D_low) peers in its rollouts mesh (gossipsub grafts up to
    D_low on its heartbeat): before that a publication may reach only part of the swarm."""
    from node.transport.libp2p.transport import gossip_topics

    topic = gossip_topics(SWARM)[0]
    deadline = time.monotonic() + MESH_TIMEOUT_S
    while True:
        sizes = [t.host.mesh_peers(topic) for t in ts]
        want = min(len(ts) - 1, ts[0].host.pubsub.router.degree_low)
        if min(sizes) >= want:
            return
        if time.monotonic() > deadline:
            raise RuntimeError(f"libp2p: gossipsub meshes of {sizes} peers after {MESH_TIMEOUT_S:g} s, "
                               f"wanted {want} each")
        await asyncio.sleep(0.05)


async def close_all(ts: list[Transport], stop_boot: Callable | None) -> None:
    """Close every transport and the bootstrap node: no p2pd (nor trio thread) may outlive the benchmark."""
    for t in ts:
        await t.close()
    if stop_boot is not None:
        await stop_boot()


async def latency(kind: str, n: int, policy: Policy, records: list[RolloutRecord],
                  args: argparse.Namespace) -> dict:
    """One publisher and ``n`` receivers over ``kind``; ``--warmup`` + ``--trials`` publications."""
    clock = RoundClock(ROUND_SECONDS)
    ids = [Identity.generate() for _ in range(n + 1)]
    t_setup = time.perf_counter()
    ts, stop_boot = await make_transports(kind, ids)
    setup_s = time.perf_counter() - t_setup
    exs = [make_exchange(t, i, policy, clock, args.poll, args.max_round_lag) for t, i in zip(ts, ids)]
    for ex in exs:  # as SwarmExchange.start, which would also start a receive loop of its own
        ex._loop = asyncio.get_running_loop()
        ex.transport.set_gate(ex.gate)  # libp2p: the topic validator; the others have no gate
    pub, receivers = exs[0], exs[1:]
    run = SwarmRun()
    tasks = [asyncio.create_task(receive(k, ex, run, args.poll)) for k, ex in enumerate(receivers)]
    trials: list[Publication] = []
    # CPU of this one process (all nodes' Python side) over wall time: near 100% of a core, the
    # receivers' polls queue behind each other in the shared event loop.
    cpu0, wall0, machine0 = time.process_time(), time.perf_counter(), machine_jiffies()
    try:
        for _ in range(args.warmup + args.trials):
            # A random gap of up to 3 receive cycles puts the publication at a random point of
            # every receiver's cycle; right after the last arrival the phases would be fixed.
            cycle = args.poll + (statistics.median(run.empty_poll_s[-50:]) if run.empty_poll_s else 0.0)
            trials.append(await publish_trial(pub, run, records, n, random.uniform(0, 3 * cycle), args.timeout))
        run.current = None
        cpu_share = (time.process_time() - cpu0) / (time.perf_counter() - wall0)
        machine_share = busy_share(machine0)
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        await close_all(ts, stop_boot)
    counted = trials[args.warmup:]
    complete = [p for p in counted if len(p.arrivals) == n]
    all_n = [max(p.arrivals.values()) for p in complete]
    per_peer = [t for p in counted for t in p.arrivals.values()]
    rejected = sum(sum(ex.stats.rejected.values()) + sum(ex.transport.rejected.values()) for ex in receivers)
    return {
        "transport": kind, "peers": n, "trials": len(counted), "warmup": args.warmup,
        "setup_s": setup_s, "process_cpu_share": cpu_share,
        "machine_cpu_share": machine_share,
        "incomplete_trials": len(counted) - len(complete),
        "median_all_s": statistics.median(all_n) if all_n else None,
        "p95_all_s": float(np.percentile(all_n, 95)) if all_n else None,
        "median_per_peer_s": statistics.median(per_peer) if per_peer else None,
        "median_publish_call_s": statistics.median(p.publish_s for p in counted),
        "median_empty_poll_s": statistics.median(run.empty_poll_s) if run.empty_poll_s else None,
        "warmup_all_s": [max(p.arrivals.values(), default=None) for p in trials[:args.warmup]],
        "rejected": rejected, "poll_errors": run.poll_errors,
        "fetch_failures": sum(getattr(ex.transport, "fetch_failures", 0) for ex in receivers),
        "all_s": all_n, "per_peer_s": per_peer,
    }


# -- verification throughput ----------------------------------------------------------------------
def timed_chunks(fn, items: list, chunks: int = CHUNKS) -> tuple[list[float], list]:
    """Run ``fn`` over ``items`` in ``chunks`` timed slices; returns the slice times and results."""
    times, out = [], []
    size = -(-len(items) // chunks)
    for k in range(0, len(items), size):
        part = items[k:k + size]
        t0 = time.perf_counter()
        out += [fn(x) for x in part]
        times.append(time.perf_counter() - t0)
    return times, out


def verification(policy: Policy, records: list[RolloutRecord], n: int) -> dict:
    """Envelopes/s through ``Verifier.verify`` alone and through the full ``SwarmExchange.admit``."""
    clock = RoundClock(3600.0)  # one round for the whole test: no envelope goes stale
    sender = Identity.generate()
    pub = make_exchange(MemoryTransport(swarm=SWARM, publisher=sender.peer_id, hub=MemoryHub()),
                        sender, policy, clock, NODE_POLL_SECONDS, 4)
    r = clock.current()
    blobs = [pub.make_envelope(r, 0, records) for _ in range(n)]  # distinct seq, nonce, timestamp

    envs = [envelope_from_bytes(b) for b in blobs]  # parsed outside the timer: (a) is verify alone
    verifier = Verifier()
    v_times, verdicts = timed_chunks(verifier.verify, envs)

    me = Identity.generate()
    rx = make_exchange(MemoryTransport(swarm=SWARM, publisher=me.peer_id, hub=MemoryHub()),
                       me, policy, clock, NODE_POLL_SECONDS, 4)
    deliveries = [Delivery(r, sender.peer_id, b) for b in blobs]

    def admit_fresh(d: Delivery) -> int:
        # All envelopes come from one sender in one round, and a node admits one batch per
        # sender and round: forget that pair so each envelope goes through every check.
        rx._batches.clear()
        return rx.admit(d)

    a_times, admitted = timed_chunks(admit_fresh, deliveries)

    return {
        "envelopes": n, "envelope_bytes": len(blobs[0]),
        "verify": {"accepted": sum(v is VerifyResult.ACCEPTED for v in verdicts),
                   "msgs_per_s": n / sum(v_times), "us_per_msg": sum(v_times) / n * 1e6,
                   "chunk_s": v_times},
        "admit": {"accepted": sum(a > 0 for a in admitted), "rejected": dict(rx.stats.rejected),
                  "msgs_per_s": n / sum(a_times), "us_per_msg": sum(a_times) / n * 1e6,
                  "records_per_s": n * len(records) / sum(a_times), "chunk_s": a_times},
    }


# -- report ---------------------------------------------------------------------------------------
def ms(x: float | None) -> str:
    return "n/a" if x is None else f"{x * 1e3:.1f}"


def pct(x: float | None) -> str:
    return "n/a" if x is None else f"{x:.0%}"


def ratio(a: float | None, b: float | None) -> str:
    return "n/a" if a is None or b is None else f"{a / b:.2f}"


def throughput_row(name: str, x: dict, n: int) -> str:
    return f"| {name} | {x['msgs_per_s']:.0f} | {x['us_per_msg']:.0f} | {x['accepted']}/{n} |"


def markdown(result: dict) -> list[str]:
    b, runs, v, poll = result["batch"], result["latency"], result["verification"], result["poll_s"]
    md = [
        "# Swarm: publish-to-available latency and admission throughput",
        "",
        f"`{result['command']}`",
        "",
        f"Batch: {b['groups']} task groups x {b['completions_per_group']} completions = {b['records']} "
        f"records ({b['completion_tokens']} completion tokens, max_new_tokens {b['max_new_tokens']}) "
        f"from the embedded default model; signed envelope **{result['envelope_bytes']} bytes**.",
        "",
        f"Latency: from the publisher starting to sign the envelope until receivers have *admitted* "
        f"it (fetched, signature + replay checked, decoded, checked). One publisher + N receivers, all "
        f"in one Python process and event loop on loopback (each hivemind node still runs its own "
        f"p2pd daemon; hivemind adds a bootstrap DHT node). The libp2p rows run in a second Python "
        f"process of the same invocation (py-libp2p and hivemind cannot share one): each node a "
        f"py-libp2p host in a trio thread of its own, no daemon, plus a bootstrap host that joins no "
        f"topic; gossipsub pushes the envelope, each node's topic validator runs the admission checks "
        f"before forwarding it, and trials start once every node has min(N, 4) peers in its gossipsub "
        f"mesh. Receivers poll every {poll:g} s "
        f"(the node's default `swarm.poll_seconds` is {NODE_POLL_SECONDS:g} s) over the "
        f"{result['max_round_lag'] + 1} rounds of the staleness window: pull-based polling alone adds "
        f"~poll/2 = {poll / 2 * 1e3:.0f} ms on average (here {poll * 13 / 24 * 1e3:.0f} ms: "
        f"the sleep between polls is jittered ±50% because receivers sharing one event loop "
        f"phase-lock otherwise, unlike separate nodes). {result['trials']} trials per N "
        f"after {result['warmup']} warm-up trials, each a fresh signed envelope in a round of its own "
        f"({result['round_seconds']:g} s rounds: a node publishes one batch a round, and the "
        f"transports pass on one body per publisher and round).",
        "",
        "| N | transport | median all N (ms) | p95 all N (ms) | median per peer (ms) | "
        "publish call (ms) | empty poll (ms) | process CPU | machine CPU | incomplete |",
        "|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for x in runs:
        cells = [x["peers"], x["transport"], ms(x["median_all_s"]), ms(x["p95_all_s"]),
                 ms(x["median_per_peer_s"]), ms(x["median_publish_call_s"]), ms(x["median_empty_poll_s"]),
                 pct(x["process_cpu_share"]), pct(x["machine_cpu_share"]), x["incomplete_trials"]]
        md.append("| " + " | ".join(map(str, cells)) + " |")
    row = {(x["peers"], x["transport"]): x for x in runs}
    others = [k for k in result["transports"] if k != "memory"]
    if "memory" in result["transports"] and others:
        md += ["", "| N | transport | transport / memory, median all N | p95 all N | median per peer | "
                   "transport - memory, median all N (ms) |", "|---:|---|---:|---:|---:|---:|"]
        for n, k in ((n, k) for n in result["peers"] for k in others):
            x, m = row.get((n, k)), row.get((n, "memory"))
            if x is None or m is None:
                continue
            diff = None if None in (x["median_all_s"], m["median_all_s"]) else x["median_all_s"] - m["median_all_s"]
            cells = [n, k, ratio(x["median_all_s"], m["median_all_s"]), ratio(x["p95_all_s"], m["p95_all_s"]),
                     ratio(x["median_per_peer_s"], m["median_per_peer_s"]), ms(diff)]
            md.append("| " + " | ".join(map(str, cells)) + " |")
    missing = [f"N={n} {k}" for n in result["peers"] for k in result["transports"] if (n, k) not in row]
    if missing:
        md += ["", f"Not measured: {', '.join(missing)} (its process failed; see the run's output)."]
    md += [
        "",
        "*publish call*: until `transport.publish` returned (hivemind: the DHT store of the index "
        "record; libp2p: the gossipsub publish, run in the host's trio thread). *empty poll*: one "
        "receiver poll that found nothing new (hivemind: one DHT get_many over the rounds of the "
        "window; libp2p: a look into the inbox that gossip fills). *process CPU*: CPU time of the "
        "Python process that runs every node of the row over wall time during the trials (one core "
        "= 100%; the p2pd daemons are separate processes, the libp2p hosts' trio threads are "
        "not). *machine CPU*: share of all cores busy (every process, p2pd daemons included). "
        "Where either nears 100%, polls and fetches wait for the CPU rather than the network, and "
        "those latencies are an upper bound for nodes that each have their own machine.",
        "",
        f"Admission throughput, one node, {v['envelopes']} distinct envelopes of this batch:",
        "",
        "| path | envelopes/s | µs per envelope | accepted |",
        "|---|---:|---:|---:|",
        throughput_row("`Verifier.verify` (Ed25519 + peer id + clock + replay bookkeeping)",
                       v["verify"], v["envelopes"]),
        throughput_row("`SwarmExchange.admit` (parse + verify + decode + schema + task ids + token/text)",
                       v["admit"], v["envelopes"]),
        "",
        f"The full admission handles {v['admit']['records_per_s']:.0f} rollout records/s. "
        f"{result['machine']}, Python {result['python']}, load average at the end {result['load_avg_1m']:.2f}.",
    ]
    return md


async def run_latency(policy: Policy, records: list[RolloutRecord], batch: dict,
                      args: argparse.Namespace) -> list[dict]:
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
        args.json_out.write_text(json.dumps({"batch": batch, "latency": runs}))
        return 0
    verify = verification(policy, records, args.verify_n)
    result = {
        "benchmark": "swarm: publish-to-available latency (memory, hivemind, libp2p) and admission throughput",
        "command": " ".join(["python scripts/bench_swarm.py", *sys.argv[1:]]),
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
    write_report(args.out, "bench_swarm" + (f"-{args.tag}" if args.tag else ""), result, markdown(result), times)
    return 0 if len(runs) == len(args.peers) * len(args.transports) else 1


if __name__ == "__main__":
    sys.exit(main())
