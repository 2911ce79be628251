"""The pipelined weight broadcast against the source sending to every follower, with capped uploads.

    python scripts/bench_broadcast.py --out docs/results          # 64 MB, 4 MB/s, N = 1 2 4 8 (~6 min)

One source and N followers, each a ``BroadcastPeer`` on its own hivemind p2p daemon on loopback,
every node's upload capped at U by the application's token bucket (node/broadcast/bucket.py), so
the cap is the same on any machine. For each N, in one run and on the same daemons:

- (a) ``pipelined``: the chain (fanout 1) of node/broadcast/topology.py;
- (b) ``source_to_all``: the star (fanout N), the source uploading every copy itself;
- (c) ``limit``: S/U, the time one copy takes at the cap, which no scheme beats (the source's
  upload has to carry the state once).

The time of a trial is from ``publish`` to the last follower holding the whole version, verified
(``on_version``); each follower's bytes are checked against the source's. At the largest N the
chain runs once more with one relay (the middle one) killed when it holds half the version: its
daemon is shut down, its children route around it; and once under a flood of fresh identities:
200 announce as followers, the source orders relays as a learner does (node/broadcast/directory.py:
the N - 1 followers it vouches for first, then at most 4 strangers, drawn by hash from the
newcomer and the 200), and the strangers that get a place stall every chunk request (NOT_YET,
forever). The row gives the vouched followers' time and the newcomer's, beside the clean chain.

Writes ``bench_broadcast.json`` and ``bench_broadcast.md`` into ``--out``.
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import json
import os
import platform
import random
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

META = dict(model_fingerprint="bench", tokenizer_fingerprint="bench", format="safetensors-full")


def _staller_class():
    from node.broadcast.peer import NOT_YET, BroadcastPeer

    class Staller(BroadcastPeer):
        """A stranger with a relay's place that never serves: every chunk is "not yet", after the
        wait an honest parent would take."""

        async def _serve_chunk(self, remote, digest, i):
            await asyncio.sleep(self.chunk_wait_s)
            return NOT_YET, b""

    return Staller


async def _network(n: int, upload: float, window: int, stallers=()):
    from node.broadcast.bucket import TokenBucket
    from node.broadcast.hivemind_carrier import HivemindCarrier
    from node.broadcast.peer import BroadcastPeer
    from protocol.identity import Identity

    ids = [Identity.generate() for _ in range(n + 1)]
    directory: dict[str, str] = {}
    done: dict[str, asyncio.Queue] = {}
    peers = []
    for k, ident in enumerate(ids):
        carrier = await HivemindCarrier.create("bench", TokenBucket(upload, burst=256 * 1024))
        q = done[ident.peer_id] = asyncio.Queue()

        async def on_version(m, data, q=q):
            q.put_nowait((m.version, hashlib.sha256(data).digest(), time.monotonic()))

        peers.append(BroadcastPeer(ident, carrier, swarm="bench", directory=directory,
                                   follow=None if k == 0 else ids[0].peer_id, on_version=on_version,
                                   window=window))
    Staller = _staller_class()
    for ident in stallers:
        carrier = await HivemindCarrier.create("bench", TokenBucket(upload, burst=256 * 1024))
        peers.append(Staller(ident, carrier, swarm="bench", directory=directory))
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
    t0 = time.monotonic()
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
    out = {"seconds": max(ends), "first_s": min(ends), "each_s": ends, "source_upload_bytes": src.carrier.upload.taken - taken0,
           "followers_done": len(ends), "fallbacks": sum(p.stats.fallbacks for p in alive),
           "failed_requests": sum(sum(p.stats.failed_requests.values()) for p in alive),
           "bad_chunks": sum(sum(p.stats.bad_chunks.values()) for p in alive)}
    if killed:
        out["killed"] = killed
    return out


async def run(args) -> dict:
    size, upload, chunk = int(args.size_mb * 1e6), args.upload_mbps * 1e6, int(args.chunk_kb * 1024)
    rng = random.Random(0)
    limit = size / upload
    rows = []
    version = 0
    for n in args.followers:
        peers, done = await _network(n, upload, args.window)
        try:
            for mode, fanout in (("pipelined", 1), ("source_to_all", n)):
                version += 1
                r = await _trial(peers, done, rng.randbytes(size), version, fanout, chunk)
                rows.append({"followers": n, "mode": mode, "fanout": fanout, **r, "limit_s": limit,
                             "x_limit": r["seconds"] / limit})
                print(f"N={n} {mode:13s} {r['seconds']:6.2f} s  = {r['seconds'] / limit:.2f} x S/U", flush=True)
        finally:
            for p in peers:
                await p.close()
    n = max(args.followers)
    if n >= 3:
        peers, done = await _network(n, upload, args.window)
        try:
            version += 1
            r = await _trial(peers, done, rng.randbytes(size), version, 1, chunk, kill=n // 2 - 1)
            rows.append({"followers": n, "mode": "pipelined, one relay killed", "fanout": 1, **r, "limit_s": limit,
                         "x_limit": r["seconds"] / limit})
            print(f"N={n} relay killed  {r['seconds']:6.2f} s  = {r['seconds'] / limit:.2f} x S/U", flush=True)
        finally:
            for p in peers:
                await p.close()
    if n >= 2:
        rows.append(await _flood_trial(n, upload, args.window, rng.randbytes(size), version + 1, chunk, limit))
    return {"size_bytes": size, "upload_bytes_per_s": upload, "chunk_bytes": chunk, "window": args.window,
            "limit_s": limit, "rows": rows,
            "environment": {"python": platform.python_version(), "machine": f"{platform.machine()}, "
                            f"{os.cpu_count()} CPUs", "carrier": "hivemind p2p streams (loopback)"}}


async def _flood_trial(n: int, upload: float, window: int, data: bytes, version: int, chunk: int,
                       limit: float) -> dict:
    """N honest followers (N - 1 vouched, one newcomer) and 200 fresh identities announcing as
    followers; the relays are what a learner would sign; the strangers listed stall."""
    from node.broadcast.directory import relay_order
    from node.broadcast.topology import upstream
    from protocol.identity import Identity

    sybils = [Identity.generate() for _ in range(200)]
    draft = [Identity.generate() for _ in range(n)]  # ids of the honest followers, known in advance
    # the strangers that the learner's rule lists get a daemon (they stall); the rest only announced
    ids_of = {i.peer_id: i for i in sybils}
    honest = [i.peer_id for i in draft]
    order = relay_order([*honest, *ids_of], version, vouched=set(honest[:-1]))
    listed = [ids_of[p] for p in order if p in ids_of]
    peers, done = await _network(n, upload, window, stallers=listed)
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
        print(f"N={n} flood: vouched {row['vouched_s']:.2f} s, newcomer {row['newcomer_s']:.2f} s "
              f"({row['strangers_above_newcomer']} strangers above it)", flush=True)
        return row
    finally:
        for p in peers:
            await p.close()


def report(result: dict, out: Path) -> str:
    S, U = result["size_bytes"] / 1e6, result["upload_bytes_per_s"] / 1e6
    by = {(r["followers"], r["mode"]): r for r in result["rows"]}
    md = [f"# Weight broadcast: pipelined chain vs the source sending to all", "",
          f"A {S:.0f} MB version, chunks of {result['chunk_bytes'] // 1024} KiB, every node's upload capped at "
          f"{U:.0f} MB/s (token bucket), hivemind p2p streams on loopback, one process. S/U = "
          f"{result['limit_s']:.2f} s. Time = publish to the last follower holding the verified version.", "",
          "| followers N | pipelined (s) | × S/U | source to all (s) | × S/U | source to all / pipelined | "
          "source uploaded, pipelined (copies) |",
          "|---:|---:|---:|---:|---:|---:|---:|"]
    for n in sorted({r["followers"] for r in result["rows"]}):
        a, b = by.get((n, "pipelined")), by.get((n, "source_to_all"))
        if a is None or b is None:
            continue
        md.append(f"| {n} | {a['seconds']:.2f} | {a['x_limit']:.2f} | {b['seconds']:.2f} | {b['x_limit']:.2f} | "
                  f"{b['seconds'] / a['seconds']:.2f} | {a['source_upload_bytes'] / result['size_bytes']:.2f} |")
    killed = [r for r in result["rows"] if "killed" in r]
    for r in killed:
        md += ["", f"With one relay of {r['followers']} (position {r['killed']['relay']} of the chain) killed at "
                   f"{r['killed']['at_s']:.2f} s, holding half the version: the other {r['followers_done']} "
                   f"followers completed in {r['seconds']:.2f} s ({r['x_limit']:.2f} × S/U), "
                   f"{r['fallbacks']} chunks fetched from the node above the dead relay."]
    for r in [r for r in result["rows"] if "newcomer_s" in r]:
        clean = by.get((r["followers"], "pipelined"))
        md += ["", f"Under a flood of 200 fresh identities announcing as followers ({r['strangers_listed']} of them "
                   f"listed as relays by the learner's rule, each stalling every request): the "
                   f"{r['followers'] - 1} vouched followers completed in {r['vouched_s']:.2f} s "
                   f"({r['vouched_s'] / result['limit_s']:.2f} × S/U"
                   + (f"; clean chain {clean['seconds']:.2f} s" if clean else "") + "), the newcomer (not vouched, "
                   f"{'listed' if r['newcomer_listed'] else 'a leaf'}, {r['strangers_above_newcomer']} stranger(s) "
                   f"above it) in {r['newcomer_s']:.2f} s after {r['newcomer_failed_requests']} failed requests."]
    md += ["", "Command: `python scripts/bench_broadcast.py --out docs/results` "
               f"(--size-mb {S:g} --upload-mbps {U:g})."]
    table = "\n".join(md) + "\n"
    out.mkdir(parents=True, exist_ok=True)
    (out / "bench_broadcast.json").write_text(json.dumps(result, indent=2) + "\n")
    (out / "bench_broadcast.md").write_text(table)
    return table


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--size-mb", type=float, default=64.0, help="size S of the version (MB, 1e6 bytes)")
    # 4 MB/s (32 Mbit/s) is a home uplink; it also keeps 8 relays' streams within 2 cores' CPU,
    # so the numbers measure the broadcast, not this machine's encryption and copying.
    ap.add_argument("--upload-mbps", type=float, default=4.0, help="every node's upload cap U (MB/s)")
    ap.add_argument("--chunk-kb", type=float, default=256.0, help="chunk size (KiB); nodes pick it by size")
    ap.add_argument("--window", type=int, default=4, help="chunk requests a follower keeps in flight")
    ap.add_argument("--followers", type=int, nargs="+", default=[1, 2, 4, 8])
    ap.add_argument("--out", type=Path, default=Path(__file__).resolve().parents[1] / "docs" / "results")
    args = ap.parse_args()
    result = asyncio.run(run(args))
    print(report(result, args.out))


if __name__ == "__main__":
    main()
