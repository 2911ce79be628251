"""The pipelined weight broadcast against the source sending to every follower, with capped uploads.

    python scripts/bench_broadcast.py --out docs/results          # 64 MB, 4 MB/s, N = 1 2 4 8, both carriers
    python scripts/bench_broadcast.py --carriers hivemind --out /tmp   # the hivemind rows alone (~6 min)

One source and N followers, each a ``BroadcastPeer`` on a transport of its own on loopback, every
node's upload capped at U by the application's token bucket (node/transport/ratelimit.py), so the
cap is the same on any machine. Everything below runs once per carrier (``--carriers``), in one
invocation:

- ``hivemind``: each node its own hivemind p2p daemon (``HivemindCarrier``), in this process;
- ``libp2p``: each node a py-libp2p host on its own key (``Libp2pCarrier`` over a ``Libp2pHost``:
  noise, yamux, a trio thread per host, no daemon). py-libp2p and hivemind cannot be imported in
  one process, so these rows run in a child process (this script with ``--carriers libp2p
  --json-out FILE``) and are merged into the same report.

The peers know each other's addresses from a shared table (what a directory would hand them), so
the two differ only in the carrier. For each N, on the same transports:

- (a) ``pipelined``: the chain (fanout 1) of node/broadcast/topology.py;
- (b) ``source_to_all``: the star (fanout N), the source uploading every copy itself;
- (c) ``limit``: S/U, the time one copy takes at the cap, which no scheme beats (the source's
  upload has to carry the state once).

The time of a trial is from ``publish`` to the last follower holding the whole version, verified
(``on_version``); each follower's bytes are checked against the source's. At the largest N the
chain runs once more with one relay (the middle one) killed when it holds half the version: its
daemon (libp2p: its host) is shut down, its children route around it; and once under a flood of
fresh identities: 200 announce as followers, the source orders relays as a learner does
(``relay_order``, node/transport/directory.py: the N - 1 followers it vouches for first, then
at most 4 strangers, drawn by hash from the newcomer and the 200), and the strangers that get a
place stall every chunk request (NOT_YET, forever). The row gives the vouched followers' time and
the newcomer's, beside the clean chain. Each row also gives this process's CPU over the trial:
every libp2p host shares it (py-libp2p encrypts and muxes in Python), so where it nears one core
the libp2p rows measure the machine rather than the broadcast.

Writes ``bench_broadcast.json`` and ``bench_broadcast.md`` into ``--out`` (one table, a row per
carrier and N).
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import platform
import random
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from common.processes import hand_back, in_own_process  # noqa: E402
from common.report import machine, write_results  # noqa: E402

CARRIERS = ("hivemind", "libp2p")
CARRIER_TEXT = {"hivemind": "hivemind p2p streams, a p2pd daemon per node",
                "libp2p": "py-libp2p streams, a host per node (a trio thread of a second process)"}
META = dict(model_fingerprint="bench", tokenizer_fingerprint="bench", format="safetensors-full")


def _staller_class():
    from swarm_node.node.broadcast.peer import BroadcastPeer
    from swarm_node.node.broadcast.wire import NOT_YET

    class Staller(BroadcastPeer):
        """A stranger with a relay's place that never serves: every chunk is "not yet", after the
        wait an honest parent would take."""

        async def _serve_chunk(self, remote, digest, i):
            await asyncio.sleep(self.chunk_wait_s)
            return NOT_YET, b""

    return Staller


async def _carrier(kind: str, ident, upload: float):
    """A carrier on a transport of its own (a p2pd daemon; a py-libp2p host on ``ident``'s key, as
    a node's), uploads capped at ``upload``; closing it ends that transport, as a killed node's."""
    from swarm_node.node.transport.ratelimit import TokenBucket

    bucket = TokenBucket(upload, burst=256 * 1024)
    if kind == "hivemind":
        from swarm_node.node.transport.hivemind.carrier import HivemindCarrier

        return await HivemindCarrier.create("bench", bucket)
    from swarm_node.node.transport.libp2p.carrier import Libp2pCarrier, weights_protocol
    from swarm_node.node.transport.libp2p.host import Libp2pHost

    class HostCarrier(Libp2pCarrier):
        async def close(self):
            await super().close()
            await self.host.close()

    host = Libp2pHost(ident, ["/ip4/127.0.0.1/tcp/0"], [])
    await host.start()
    return HostCarrier(host, weights_protocol("bench"), bucket)


async def _network(kind: str, n: int, upload: float, window: int, stallers=()):
    from swarm_node.node.broadcast.peer import BroadcastPeer
    from swarm_node.protocol.identity import Identity

    ids = [Identity.generate() for _ in range(n + 1)]
    directory: dict[str, str] = {}
    done: dict[str, asyncio.Queue] = {}
    peers = []
    for k, ident in enumerate(ids):
        carrier = await _carrier(kind, ident, upload)
        q = done[ident.peer_id] = asyncio.Queue()

        async def on_version(m, data, q=q):
            q.put_nowait((m.version, hashlib.sha256(data).digest(), time.monotonic()))

        peers.append(BroadcastPeer(ident, carrier, swarm="bench", directory=directory,
                                   follow=None if k == 0 else ids[0].peer_id, on_version=on_version,
                                   window=window))
    Staller = _staller_class()
    for ident in stallers:
        peers.append(Staller(ident, await _carrier(kind, ident, upload), swarm="bench", directory=directory))
    for p in peers:
        await p.start()
        directory[p.me] = p.carrier.address
    return peers, done


async def _trial(peers, done, data: bytes, version: int, fanout: int, chunk: int, kill: int | None = None,
                 relays: list[str] | None = None) -> dict:
    """One version to every follower; a follower not in ``relays`` learns of it as a node does
    from the source's DHT pointer: it asks the source for the manifest by digest."""
    src, followers = peers[0], [p for p in peers[1:] if p.me in done]
    want = hashlib.sha256(data).digest()
    taken0 = src.carrier.upload.taken
    t0, cpu0 = time.monotonic(), time.process_time()
    m = await src.publish(data, version=version, step=version, relays=relays or [p.me for p in followers],
                          fanout=fanout, chunk_size=chunk, **META)
    for p in followers:
        if p.me not in m.relays:
            await p.ask_manifest(src.me, m.digest)
    alive = list(followers)
    killed = None
    if kill is not None:
        victim = followers[kill]
        while True:  # kill it when it holds half the version
            t = next((t for t in victim.held.values() if t.manifest.version == version), None)
            if t is not None and (t.data is not None or sum(map(len, t.chunks.values())) >= len(data) // 2):
                break
            await asyncio.sleep(0.01)
        await victim.carrier.close()
        alive.remove(victim)
        killed = {"relay": kill + 1, "at_s": time.monotonic() - t0}
    ends = []
    for p in alive:
        while True:
            v, digest, at = await asyncio.wait_for(done[p.me].get(), 600)
            if v == version:
                break
        if digest != want:
            raise SystemExit(f"follower {p.me} got different bytes")
        ends.append(at - t0)
    # this process's CPU over the trial (one core = 1): every node's Python side, py-libp2p's
    # encryption and muxing included; hivemind's run in the p2pd daemons, other processes
    cpu = (time.process_time() - cpu0) / (time.monotonic() - t0)
    out = {"seconds": max(ends), "first_s": min(ends), "each_s": ends, "process_cpu_share": cpu,
           "source_upload_bytes": src.carrier.upload.taken - taken0,
           "followers_done": len(ends), "fallbacks": sum(p.stats.fallbacks for p in alive),
           "failed_requests": sum(sum(p.stats.failed_requests.values()) for p in alive),
           "bad_chunks": sum(sum(p.stats.bad_chunks.values()) for p in alive)}
    if killed:
        out["killed"] = killed
    return out


async def run(args, kind: str) -> dict:
    """Every trial over carrier ``kind``; each row names it."""
    size, upload, chunk = int(args.size_mb * 1e6), args.upload_mbps * 1e6, int(args.chunk_kb * 1024)
    rng = random.Random(0)
    limit = size / upload
    rows = []
    version = 0
    for n in args.followers:
        peers, done = await _network(kind, n, upload, args.window)
        try:
            for mode, fanout in (("pipelined", 1), ("source_to_all", n)):
                version += 1
                r = await _trial(peers, done, rng.randbytes(size), version, fanout, chunk)
                rows.append({"followers": n, "mode": mode, "fanout": fanout, **r, "limit_s": limit,
                             "x_limit": r["seconds"] / limit})
                print(f"{kind} N={n} {mode:13s} {r['seconds']:6.2f} s  = {r['seconds'] / limit:.2f} x S/U", flush=True)
        finally:
            for p in peers:
                await p.close()
    n = max(args.followers)
    if n >= 3:
        peers, done = await _network(kind, n, upload, args.window)
        try:
            version += 1
            r = await _trial(peers, done, rng.randbytes(size), version, 1, chunk, kill=n // 2 - 1)
            rows.append({"followers": n, "mode": "pipelined, one relay killed", "fanout": 1, **r, "limit_s": limit,
                         "x_limit": r["seconds"] / limit})
            print(f"{kind} N={n} relay killed  {r['seconds']:6.2f} s  = {r['seconds'] / limit:.2f} x S/U", flush=True)
        finally:
            for p in peers:
                await p.close()
    if n >= 2:
        rows.append(await _flood_trial(kind, n, upload, args.window, rng.randbytes(size), version + 1, chunk, limit))
    return {"size_bytes": size, "upload_bytes_per_s": upload, "chunk_bytes": chunk, "window": args.window,
            "limit_s": limit, "rows": [{"carrier": kind, **r} for r in rows],
            "environment": {"python": platform.python_version(), "machine": machine(),
                            "carriers": {kind: CARRIER_TEXT[kind]}}}


async def _flood_trial(kind: str, n: int, upload: float, window: int, data: bytes, version: int, chunk: int,
                       limit: float) -> dict:
    """N honest followers (N - 1 vouched, one newcomer) and 200 fresh identities announcing as
    followers; the relays are what a learner would sign; the strangers listed stall."""
    from swarm_node.node.transport.directory import relay_order
    from swarm_node.node.broadcast.topology import upstream
    from swarm_node.protocol.identity import Identity

    sybils = [Identity.generate() for _ in range(200)]
    draft = [Identity.generate() for _ in range(n)]  # ids of the honest followers, known in advance
    # the strangers that the learner's rule lists get a daemon (they stall); the rest only announced
    ids_of = {i.peer_id: i for i in sybils}
    honest = [i.peer_id for i in draft]
    announced = {p: (f"/ip4/127.0.0.1/tcp/1/p2p/{p}", 0) for p in [*honest, *ids_of]}  # all direct, as on loopback
    order = relay_order(announced, version, vouched=set(honest[:-1]))
    listed = [ids_of[p] for p in order if p in ids_of]
    peers, done = await _network(kind, n, upload, window, stallers=listed)
    try:
        followers = [p for p in peers[1:] if p.me in done]
        # map the drafted ids onto the network's followers (same count, order kept)
        rename = dict(zip(honest, [p.me for p in followers]))
        relays = [rename.get(p, p) for p in order]
        r = await _trial(peers, done, data, version, 1, chunk, relays=relays)
        m = next(reversed(peers[0].held.values())).manifest
        newcomer = followers[-1]
        up = upstream(m, newcomer.me)
        each = dict(zip([p.me for p in followers], r["each_s"]))
        row = {"followers": n, "mode": "pipelined, 200 fresh identities", "fanout": 1, **r, "limit_s": limit,
               "x_limit": r["seconds"] / limit, "strangers_listed": len(listed),
               "vouched_s": max(each[p.me] for p in followers[:-1]), "newcomer_s": each[newcomer.me],
               "newcomer_listed": newcomer.me in m.relays,
               "strangers_above_newcomer": sum(p in {s.peer_id for s in listed} for p in up),
               "newcomer_failed_requests": sum(newcomer.stats.failed_requests.values())}
        print(f"{kind} N={n} flood: vouched {row['vouched_s']:.2f} s, newcomer {row['newcomer_s']:.2f} s "
              f"({row['strangers_above_newcomer']} strangers above it)", flush=True)
        return row
    finally:
        for p in peers:
            await p.close()


def report(result: dict, out: Path) -> str:
    S, U = result["size_bytes"] / 1e6, result["upload_bytes_per_s"] / 1e6
    carriers = result["environment"]["carriers"]
    by = {(r["carrier"], r["followers"], r["mode"]): r for r in result["rows"]}
    md = [f"# Weight broadcast: pipelined chain vs the source sending to all", "",
          f"A {S:.0f} MB version, chunks of {result['chunk_bytes'] // 1024} KiB, every node's upload capped at "
          f"{U:.0f} MB/s (token bucket), on loopback over "
          + "; ".join(f"**{k}**: {v}" for k, v in carriers.items()) + f". S/U = "
          f"{result['limit_s']:.2f} s. Time = publish to the last follower holding the verified version. "
          "*Process CPU*: the benchmark process's CPU time over the trial (one core = 100%): every "
          "node's Python side, py-libp2p's encryption and muxing included (hivemind's run in the "
          "p2pd daemons); near 100%, the time measures this machine's CPU, not the broadcast.", "",
          "| followers N | carrier | pipelined (s) | × S/U | source to all (s) | × S/U | source to all / pipelined | "
          "source uploaded, pipelined (copies) | process CPU, pipelined |",
          "|---:|---|---:|---:|---:|---:|---:|---:|---:|"]
    for n, c in ((n, c) for n in sorted({r["followers"] for r in result["rows"]}) for c in carriers):
        a, b = by.get((c, n, "pipelined")), by.get((c, n, "source_to_all"))
        if a is None or b is None:
            continue
        md.append(f"| {n} | {c} | {a['seconds']:.2f} | {a['x_limit']:.2f} | {b['seconds']:.2f} | {b['x_limit']:.2f} | "
                  f"{b['seconds'] / a['seconds']:.2f} | {a['source_upload_bytes'] / result['size_bytes']:.2f} | "
                  f"{a['process_cpu_share']:.0%} |")
    killed = [r for r in result["rows"] if "killed" in r]
    for r in killed:
        md += ["", f"{r['carrier']}: with one relay of {r['followers']} (position {r['killed']['relay']} of the "
                   f"chain) killed at {r['killed']['at_s']:.2f} s, holding half the version: the other "
                   f"{r['followers_done']} followers completed in {r['seconds']:.2f} s ({r['x_limit']:.2f} × S/U), "
                   f"{r['fallbacks']} chunks fetched from the node above the dead relay."]
    for r in [r for r in result["rows"] if "newcomer_s" in r]:
        clean = by.get((r["carrier"], r["followers"], "pipelined"))
        md += ["", f"{r['carrier']}: under a flood of 200 fresh identities announcing as followers "
                   f"({r['strangers_listed']} of them listed as relays by the learner's rule, each stalling every "
                   f"request): the {r['followers'] - 1} vouched followers completed in {r['vouched_s']:.2f} s "
                   f"({r['vouched_s'] / result['limit_s']:.2f} × S/U"
                   + (f"; clean chain {clean['seconds']:.2f} s" if clean else "") + "), the newcomer (not vouched, "
                   f"{'listed' if r['newcomer_listed'] else 'a leaf'}, {r['strangers_above_newcomer']} stranger(s) "
                   f"above it) in {r['newcomer_s']:.2f} s after {r['newcomer_failed_requests']} failed requests."]
    if result.get("missing"):
        md += ["", f"Not measured: {', '.join(result['missing'])} (its process failed; see the run's output)."]
    md += ["", "Command: `python scripts/bench_broadcast.py --out docs/results` "
               f"(--size-mb {S:g} --upload-mbps {U:g} --carriers {' '.join(carriers)})."]
    return write_results(out, "bench_broadcast", result, md)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--size-mb", type=float, default=64.0, help="size S of the version (MB, 1e6 bytes)")
    # 4 MB/s (32 Mbit/s) is a home uplink; it also keeps 8 relays' streams within 2 cores' CPU,
    # so the numbers measure the broadcast, not this machine's encryption and copying.
    ap.add_argument("--upload-mbps", type=float, default=4.0, help="every node's upload cap U (MB/s)")
    ap.add_argument("--chunk-kb", type=float, default=256.0, help="chunk size (KiB); nodes pick it by size")
    ap.add_argument("--window", type=int, default=4, help="chunk requests a follower keeps in flight")
    ap.add_argument("--followers", type=int, nargs="+", default=[1, 2, 4, 8])
    ap.add_argument("--carriers", nargs="+", choices=CARRIERS, default=list(CARRIERS),
                    help="transports to run every trial over (libp2p's in a child process)")
    ap.add_argument("--out", type=Path, default=Path(__file__).resolve().parents[1] / "docs" / "results")
    ap.add_argument("--json-out", type=Path, default=None,
                    help="only the result, as JSON into this file, no report (how the libp2p rows run in a "
                         "process of their own)")
    args = ap.parse_args()
    parts = {}
    for kind in args.carriers:
        if kind == "libp2p" and args.json_out is None:
            # the same flags (argparse keeps an option's last value)
            parts[kind] = in_own_process(__file__, [*sys.argv[1:], "--carriers", kind])
        else:
            parts[kind] = asyncio.run(run(args, kind))
    done = [p for p in parts.values() if p is not None]
    if not done:
        return 1
    result = {**done[0], "rows": [r for p in done for r in p["rows"]],
              "missing": [k for k, p in parts.items() if p is None]}
    result["environment"]["carriers"] = {k: v for p in done for k, v in p["environment"]["carriers"].items()}
    if args.json_out is not None:
        hand_back(args.json_out, result)
        return 0
    print(report(result, args.out))
    return 1 if result["missing"] else 0


if __name__ == "__main__":
    sys.exit(main())
