"""The MQTT transport beside the hivemind transport, and the weight broadcast through a broker.

    python scripts/bench_mqtt.py --out docs/results        # N = 2 4 8, then the broadcast (~10 min)

Everything runs on this machine, on loopback: a local Mosquitto (node/transport/mqtt/broker.py, anonymous
listener, no packet limit) for MQTT; a bootstrap DHT peer and one p2p daemon per node for
hivemind. Each node is the transport the node runtime uses (node/transport/mqtt/transport.py,
node/transport/hivemind/transport.py), in this one process, polled every ``--poll-ms`` as a node's
receive task polls (the node's default is 250 ms; a smaller one shows the transport's own delay).

1. **Rollout delivery.** For N = 2, 4, 8 nodes, every node publishes one envelope a round for
   ``--rounds`` rounds of ``--round-seconds`` (a signed RolloutBatch the size of a default node's:
   4 groups x 8 completions x 16 tokens). Latency is from ``publish`` being called to a receiver's
   ``poll`` returning it, for every (publisher, receiver) pair; median and p95, and the share of
   the N(N-1) deliveries a round that arrived at all.
2. **Throughput.** All to all: every node publishes a ``--burst-mb`` body for the same round; the
   time until every node holds the N - 1 others' gives the delivered MB/s (N(N-1) x size / time).
   Three bursts each, the median reported.
3. **The broadcast through the broker**, for the same state as scripts/bench_broadcast.py (64 MB in
   256 KiB chunks, every node's upload capped at 4 MB/s by the application's token bucket): the
   pipelined chain against the source sending to every follower (the star), and S/U, for
   N = 1, 2, 4, 8 followers, each a ``BroadcastPeer`` on an ``MqttCarrier``. The hivemind numbers
   from docs/results/bench_broadcast.json are shown beside them (that benchmark's own run).

Writes ``bench_mqtt.json`` and ``bench_mqtt.md`` into ``--out``.
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import json
import os
import platform
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from common.report import machine, write_results  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
LOOPBACK = dict(host_maddrs=["/ip4/127.0.0.1/tcp/0"], use_relay=False, nat_port_map=False)
META = dict(model_fingerprint="bench", tokenizer_fingerprint="bench", format="safetensors-full")


def _batch_envelope(ident, r: int) -> bytes:
    """A signed batch the size of a default node's: 4 groups x 8 completions x 16 tokens."""
    from swarm_node.protocol.codec import encode
    from swarm_node.protocol.messages import RolloutBatch, RolloutRecord
    from swarm_node.protocol.signing import envelope_to_bytes, sign

    rng = random.Random(r)
    recs = []
    for g in range(4):
        for _ in range(8):
            ids = tuple(rng.randrange(300) for _ in range(16))
            recs.append(RolloutRecord(f"arithmetic:{r * 4 + g}:1", ids, "x" * 40, tuple(-rng.random() for _ in ids), False))
    b = RolloutBatch(sender=ident.peer_id, round=r, policy_version=1, model_fingerprint="m", tokenizer_fingerprint="t",
                     created_at=time.time(), rollouts=tuple(recs))
    return envelope_to_bytes(sign(encode(b), ident, r))


class _Swarm:
    """N transports of one kind, started; ``close`` stops them and what they need."""

    def __init__(self, kind: str, n: int, round_seconds: float, tmp: Path):
        self.kind, self.n, self.round_seconds, self.tmp = kind, n, round_seconds, tmp
        self.ts, self.extra = [], None

    async def __aenter__(self):
        from swarm_node.protocol.identity import Identity

        self.ids = [Identity.generate() for _ in range(self.n)]
        if self.kind == "mqtt":
            from swarm_node.node.transport.mqtt.broker import Mosquitto
            from swarm_node.node.transport.mqtt.url import parse_broker_url
            from swarm_node.node.transport.mqtt.transport import MqttTransport

            self.extra = Mosquitto(self.tmp / f"broker-{self.n}").start()
            url = parse_broker_url(self.extra.url())
            self.ts = [MqttTransport(swarm="bench", publisher=i.peer_id, broker=url, join_retries=0) for i in self.ids]
        else:
            from swarm_node.node.transport.hivemind.records import bootstrap_validator
            from swarm_node.node.transport.hivemind.transport import HivemindTransport
            from swarm_node.node.transport.hivemind.daemon import start_dht_node

            self.extra = await start_dht_node(initial_peers=[], retries=0, record_validator=bootstrap_validator(),
                                              **LOOPBACK)
            maddrs = [str(m) for m in await self.extra.p2p.get_visible_maddrs()]
            self.ts = [HivemindTransport(swarm="bench", publisher=i.peer_id, signer=i, initial_peers=maddrs,
                                         join_retries=0, round_seconds=self.round_seconds, **LOOPBACK)
                       for i in self.ids]
        for t in self.ts:
            await t.start()
        return self

    async def __aexit__(self, *exc):
        for t in self.ts:
            await t.close()
        if self.kind == "mqtt":
            self.extra.stop()
        else:
            from swarm_node.node.transport.hivemind.daemon import stop_dht_node

            await stop_dht_node(self.extra)


async def _receive(t, rounds_of, until: float, poll_s: float, got: list, stop_when=None) -> None:
    while time.monotonic() < until:
        for d in await t.poll(rounds_of(), None, None):
            got.append((d.round, d.publisher, len(d.data), time.monotonic()))
        if stop_when is not None and stop_when():
            return
        await asyncio.sleep(poll_s)


async def delivery(kind: str, n: int, args, tmp: Path) -> dict:
    from swarm_node.node.clock import RoundClock

    clock = RoundClock(args.round_seconds)
    async with _Swarm(kind, n, args.round_seconds, tmp) as sw:
        sent: dict[tuple[int, str], float] = {}
        got = [[] for _ in sw.ts]
        first = clock.current() + 1
        await asyncio.sleep(max(0.0, clock.start_of(first) - time.time()))
        end = time.monotonic() + args.rounds * args.round_seconds + 5.0  # 5 s for the last round's stragglers
        window = lambda: range(max(0, clock.current() - 2), clock.current() + 1)  # noqa: E731
        receivers = [asyncio.create_task(_receive(t, window, end, args.poll_ms / 1e3, got[k]))
                     for k, t in enumerate(sw.ts)]
        for r in range(first, first + args.rounds):
            await asyncio.sleep(max(0.0, clock.start_of(r) - time.time()))
            bodies = [_batch_envelope(i, r) for i in sw.ids]
            for i, t, body in zip(sw.ids, sw.ts, bodies):
                sent[(r, i.peer_id)] = time.monotonic()
                await t.publish(r, body, expires_in=4 * args.round_seconds)
        await asyncio.gather(*receivers)
        lat = [at - sent[(r, p)] for g in got for r, p, _, at in g if (r, p) in sent]
        size = len(_batch_envelope(sw.ids[0], first))
    want = n * (n - 1) * args.rounds
    lat.sort()
    return {"transport": kind, "nodes": n, "rounds": args.rounds, "envelope_bytes": size,
            "delivered": len(lat), "expected": want, "delivered_share": len(lat) / want,
            "median_ms": 1e3 * statistics.median(lat) if lat else None,
            "p95_ms": 1e3 * lat[int(0.95 * (len(lat) - 1))] if lat else None}


async def throughput(kind: str, n: int, args, tmp: Path) -> dict:
    from swarm_node.node.clock import RoundClock

    clock = RoundClock(args.round_seconds)
    size = int(args.burst_mb * 1e6)
    times = []
    async with _Swarm(kind, n, args.round_seconds, tmp) as sw:
        for k in range(args.bursts):
            r = clock.current() + 1
            await asyncio.sleep(max(0.0, clock.start_of(r) - time.time()))
            body = os.urandom(size)
            got = [[] for _ in sw.ts]
            end = time.monotonic() + 120
            t0 = time.monotonic()
            receivers = [asyncio.create_task(_receive(t, lambda r=r: [r], end, 0.01, got[j],
                                                      stop_when=lambda g=got[j]: len(g) >= n - 1))
                         for j, t in enumerate(sw.ts)]
            for t in sw.ts:
                await t.publish(r, body, expires_in=4 * args.round_seconds)
            await asyncio.gather(*receivers)
            if any(len(g) < n - 1 for g in got):
                raise SystemExit(f"{kind} N={n}: a burst did not complete in 120 s")
            times.append(max(g[-1][3] for g in got) - t0)
    med = statistics.median(times)
    return {"transport": kind, "nodes": n, "body_bytes": size, "bursts_s": times, "median_s": med,
            "delivered_mb_per_s": n * (n - 1) * size / med / 1e6}


async def _broadcast_net(n: int, upload: float, url, window: int):
    from swarm_node.node.transport.ratelimit import TokenBucket
    from swarm_node.node.transport.mqtt.carrier import MqttCarrier
    from swarm_node.node.broadcast.peer import BroadcastPeer
    from swarm_node.node.transport.mqtt.transport import MqttTransport
    from swarm_node.protocol.identity import Identity

    ids = [Identity.generate() for _ in range(n + 1)]
    directory, done, peers, ts = {}, {}, [], []
    for k, ident in enumerate(ids):
        t = MqttTransport(swarm="bench", publisher=ident.peer_id, broker=url, join_retries=0)
        await t.start()
        ts.append(t)
        q = done[ident.peer_id] = asyncio.Queue()

        async def on_version(m, data, q=q):
            q.put_nowait((m.version, hashlib.sha256(data).digest(), time.monotonic()))

        peers.append(BroadcastPeer(ident, MqttCarrier(t, TokenBucket(upload, burst=256 * 1024)), swarm="bench",
                                   directory=directory, follow=None if k == 0 else ids[0].peer_id,
                                   on_version=on_version, window=window))
    for p in peers:
        await p.start()
        directory[p.me] = p.carrier.address
    return peers, ts, done


async def broadcast(args, tmp: Path) -> list[dict]:
    import bench_broadcast  # the same trial: publish, then time until the last follower verified it

    from swarm_node.node.transport.mqtt.broker import Mosquitto
    from swarm_node.node.transport.mqtt.url import parse_broker_url

    size, upload, chunk = int(args.size_mb * 1e6), args.upload_mbps * 1e6, int(args.chunk_kb * 1024)
    data = random.Random(0).randbytes(size)
    rows = []
    with Mosquitto(tmp / "broker-broadcast") as broker:
        url = parse_broker_url(broker.url())
        version = 0
        for n in args.followers:
            peers, ts, done = await _broadcast_net(n, upload, url, args.window)
            try:
                row = {"followers": n, "limit_s": size / upload}
                for name, fanout in (("pipelined", 1), ("source_to_all", n)):
                    version += 1
                    row[name] = await bench_broadcast._trial(peers, done, data, version, fanout, chunk)
                    print(f"broadcast N={n} {name}: {row[name]['seconds']:.1f} s", flush=True)
                rows.append(row)
            finally:
                for p in peers:
                    await p.close()
                for t in ts:
                    await t.close()
    return rows


async def run(args) -> dict:
    tmp = Path(tempfile.mkdtemp(prefix="bench-mqtt-"))
    rows, bursts = [], []
    for n in args.nodes:
        for kind in ("mqtt", "hivemind"):
            rows.append(await delivery(kind, n, args, tmp))
            r = rows[-1]
            print(f"delivery {kind} N={n}: median {r['median_ms']:.0f} ms, p95 {r['p95_ms']:.0f} ms, "
                  f"{r['delivered_share']:.0%} delivered", flush=True)
            bursts.append(await throughput(kind, n, args, tmp))
            b = bursts[-1]
            print(f"throughput {kind} N={n}: {b['delivered_mb_per_s']:.1f} MB/s", flush=True)
    bc = await broadcast(args, tmp) if args.followers else []
    return {"delivery": rows, "throughput": bursts, "broadcast": bc}


def report(result: dict, out: Path) -> str:
    a = result["args"]
    md = ["# The MQTT transport beside hivemind, and the broadcast through a broker", "",
          f"`{result['command']}` on {result['env']['machine']}, Python {result['env']['python']}, "
          f"Mosquitto {result['env']['mosquitto']}, commit {result['env']['commit']}, "
          f"{result['env']['wall_s'] / 60:.1f} min. Everything on loopback in one process (a local Mosquitto; "
          f"one p2p daemon per hivemind node and a bootstrap peer); receivers poll every {a['poll_ms']} ms.", "",
          f"## Rollout delivery: {a['rounds']} rounds of {a['round_seconds']} s, one envelope per node a round", "",
          "| N | transport | envelope | delivered | median | p95 |", "|---:|---|---:|---:|---:|---:|"]
    for r in result["delivery"]:
        md.append(f"| {r['nodes']} | {r['transport']} | {r['envelope_bytes'] / 1e3:.1f} kB | "
                  f"{r['delivered']}/{r['expected']} | {r['median_ms']:.0f} ms | {r['p95_ms']:.0f} ms |")
    md += ["", f"## Throughput: every node publishes {a['burst_mb']:g} MB for the same round (median of {a['bursts']})",
           "", "| N | transport | all-to-all time | delivered |", "|---:|---|---:|---:|"]
    for b in result["throughput"]:
        md.append(f"| {b['nodes']} | {b['transport']} | {b['median_s']:.2f} s | {b['delivered_mb_per_s']:.1f} MB/s |")
    if result["broadcast"]:
        hm = {}
        try:
            prior = json.loads((ROOT / "docs" / "results" / "bench_broadcast.json").read_text())
            if prior["size_bytes"] == int(a["size_mb"] * 1e6) and prior["upload_bytes_per_s"] == a["upload_mbps"] * 1e6:
                hm = {(r["followers"], r["mode"]): r["seconds"] for r in prior["rows"]}
        except (OSError, ValueError, KeyError):
            pass
        md += ["", f"## The weight broadcast through the broker: {a['size_mb']:g} MB, {a['chunk_kb']:g} KiB chunks, "
                   f"uploads capped at {a['upload_mbps']:g} MB/s (S/U = {a['size_mb'] / a['upload_mbps']:.0f} s)", "",
               "| N | pipelined (MQTT) | source to all (MQTT) | × S/U chain / star | hivemind chain / star "
               "(bench_broadcast.json) |", "|---:|---:|---:|---:|---:|"]
        for r in result["broadcast"]:
            p, s, lim = r["pipelined"]["seconds"], r["source_to_all"]["seconds"], r["limit_s"]
            n = r["followers"]
            hs = (f"{hm[(n, 'pipelined')]:.1f} s / {hm[(n, 'source_to_all')]:.1f} s"
                  if (n, "pipelined") in hm and (n, "source_to_all") in hm else "-")
            md.append(f"| {r['followers']} | {p:.1f} s | {s:.1f} s | {p / lim:.2f} / {s / lim:.2f} | {hs} |")
    return write_results(out, "bench_mqtt", result, md, indent=1, json_end="")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--nodes", type=int, nargs="*", default=[2, 4, 8])
    ap.add_argument("--rounds", type=int, default=20)
    ap.add_argument("--round-seconds", type=float, default=1.0)
    ap.add_argument("--poll-ms", type=int, default=20)
    ap.add_argument("--burst-mb", type=float, default=1.0)
    ap.add_argument("--bursts", type=int, default=3)
    ap.add_argument("--followers", type=int, nargs="*", default=[1, 2, 4, 8], help="broadcast N (none: skip it)")
    ap.add_argument("--size-mb", type=float, default=64.0)
    ap.add_argument("--upload-mbps", type=float, default=4.0)
    ap.add_argument("--chunk-kb", type=float, default=256.0)
    ap.add_argument("--window", type=int, default=4)
    ap.add_argument("--out", type=Path, default=ROOT / "docs" / "results")
    args = ap.parse_args()
    import subprocess

    t0 = time.time()
    # The code that runs is the commit at start (the tree may move on during a long run).
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, cwd=ROOT).stdout.strip()
    result = asyncio.run(run(args))
    from swarm_node.node.transport.mqtt.broker import mosquitto_binary

    ver = subprocess.run([mosquitto_binary(), "-h"], capture_output=True, text=True).stdout.splitlines()[:1]
    result.update(args={k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()},
                  command="python scripts/bench_mqtt.py " + " ".join(sys.argv[1:]),
                  env={"python": platform.python_version(), "machine": machine(),
                       "mosquitto": ver[0].split()[-1] if ver else "?", "commit": commit, "wall_s": time.time() - t0})
    print(report(result, args.out))


if __name__ == "__main__":
    main()
