"""Scale of the swarm index: bytes a node reads and fetches per round at 1,000 and 10,000 peers.

Issue 9 asks that a node fetch about what it uses (J groups' worth) and that one read of the
index stay small at any N. A real 10,000-node DHT does not fit on one machine, so this runs the
real parts around a simulated replica:

- N identities each sign their index entry for every round (Ed25519, ``OwnerSignatureValidator``)
  at the shard levels their size estimate picks (``write_levels``; each writer's estimate is N
  times a random factor in [0.7, 1.4], not the exact N);
- every record goes through a node's real record validator (``swarm_validator``: owner
  signature, key hash, shard rule, expiry cap, schema) before the replica keeps it, and the
  replica serves a read as hivemind does: the validator's ``strip_value`` on each entry;
- the reader is a real ``HivemindTransport`` whose DHT node and body downloads are replaced by
  that replica; its ``poll`` (shard choice, fetch budget, re-read throttle) and the size
  estimate run unchanged, polled every ``poll_seconds`` of a simulated clock, starting as a
  newcomer (it believes it is alone). What it admits is vouched for, as the exchange does.
- bodies are one real signed envelope of an honest node's size (I groups of G completions of the
  embedded default's length) for every publisher.

``before`` is the index as it was: every writer in one shard (level 0), read for every round of
the window at every poll, every envelope fetched. Bytes read count each entry's signed value,
subkey and signature wrapper as a replica sends it, once per read (a real lookup may hear the
same dictionary from more than one replica). Run:

    python scripts/bench_index_scale.py            # writes docs/results/bench_index_scale.{json,md}
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import random
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from hivemind.dht.protocol import DHTProtocol  # noqa: E402
from hivemind.dht.routing import DHTID  # noqa: E402
from hivemind.dht.validation import DHTRecord  # noqa: E402
from hivemind.utils import ValueWithExpiration  # noqa: E402

import swarm_node.node.transport.hivemind.transport as hd  # noqa: E402
from swarm_node.node.swarm.limits import envelopes_wanted  # noqa: E402
from swarm_node.node.transport.hivemind.index import shard_prefix, write_levels  # noqa: E402
from swarm_node.node.transport.hivemind.records import OwnerSignatureValidator  # noqa: E402
from swarm_node.protocol.identity import Identity  # noqa: E402
from common.report import command_line, markdown_table, write_json, write_markdown  # noqa: E402

SER = DHTProtocol.serializer


class Replica:
    """The DHT as a reader sees it: validated signed records, served through the validator."""

    def __init__(self, validator):
        self.validator = validator
        self.store: dict[str, dict[bytes, tuple[bytes, float]]] = {}
        self.refused = 0

    def put(self, signer_validator: OwnerSignatureValidator, key: str, subkey: str, value, expiration: float) -> None:
        rec = DHTRecord(DHTID.generate(source=key).to_bytes(), SER.dumps(subkey), SER.dumps(value), expiration)
        signed = signer_validator.sign_value(rec)
        if not self.validator.validate(dataclasses.replace(rec, value=signed)):
            self.refused += 1
            return
        self.store.setdefault(key, {})[SER.dumps(subkey)] = (signed, expiration)

    def shard_bytes(self, key: str) -> int:
        return sum(len(sub) + len(v) + 9 for sub, (v, _) in self.store.get(key, {}).items())

    async def get_many(self, keys, sufficient_expiration_time=None):
        out = {}
        for key in keys:
            entries = self.store.get(key)
            if not entries:
                continue
            kid = DHTID.generate(source=key).to_bytes()
            value = {}
            for sub, (signed, exp) in entries.items():
                inner = self.validator.strip_value(DHTRecord(kid, sub, signed, exp))
                value[SER.loads(sub)] = ValueWithExpiration(SER.loads(inner), exp)
            out[key] = ValueWithExpiration(value, max(e for _, e in entries.values()))
        return out


def honest_envelope(groups: int, group_size: int, tokens: int) -> tuple[bytes, Identity]:
    """One real signed rollout batch of an honest node's size."""
    from swarm_node.node.clock import RoundClock
    from swarm_node.node.swarm.exchange import SwarmExchange
    from swarm_node.node.transport.memory import MemoryHub, MemoryTransport
    from swarm_node.protocol.messages import RolloutRecord

    ident = Identity.generate()
    ex = SwarmExchange(MemoryTransport(swarm="s", publisher=ident.peer_id, hub=MemoryHub()), ident, RoundClock(5.0),
                       tokenizer_fingerprint="t" * 16, model_fingerprint="m" * 16, vocab_size=512,
                       decode_text=lambda ids: "")
    rng = random.Random(0)
    recs = [RolloutRecord(f"arithmetic:{g}:1", tuple(rng.randrange(3, 500) for _ in range(tokens)),
                          "<answer>" + "7" * (tokens // 3) + "</answer>",
                          tuple(-rng.random() * 3 for _ in range(tokens)), False)
            for g in range(groups) for _ in range(group_size)]
    return ex.make_envelope(100, 1, recs), ident


def run(n: int, *, before: bool, rounds: int, j: int, groups: int, body: bytes, seed: int,
        round_seconds: float, poll_seconds: float, window: int) -> dict:
    rng = random.Random(seed)
    swarm = "bench"
    now = [1_800_000_000.0]
    hd.get_dht_time = lambda: now[0]  # the transport's clock and the validator's: simulated
    import swarm_node.node.transport.hivemind.records as dr
    import swarm_node.node.transport.hivemind.index_records as ir

    dr.get_dht_time = ir.get_dht_time = hd.get_dht_time  # every module that reads the clock
    reader_ident = Identity.generate()
    replica = Replica(hd.swarm_validator(swarm, round_seconds, None))
    writers = [Identity.generate() for _ in range(n)]
    signers = [OwnerSignatureValidator(w) for w in writers]
    estimates = [n * rng.uniform(0.7, 1.4) for _ in writers]
    sha = __import__("hashlib").sha256(body).hexdigest()
    first_round = int(now[0] // round_seconds)

    def publish(r: int) -> None:
        for w, sv, est in zip(writers, signers, estimates):
            levels = [0] if before else write_levels(est)
            for level in levels:
                key, sub, value = hd.index_entry(swarm, r, w.peer_id, "Qm" + "x" * 44, len(body), sha,
                                                 shard_prefix(w.peer_id, level))
                replica.put(sv, key, sub, value, (r + window + 2) * round_seconds)

    t = hd.HivemindTransport(swarm=swarm, publisher=reader_ident.peer_id, signer=reader_ident,
                             round_seconds=round_seconds)
    t._node = replica
    t._rng = random.Random(seed + 1)

    async def download(peer, round, publisher, declared):
        return body

    t._download = download
    want = None if before else envelopes_wanted(j, groups)
    per_round = []

    async def go():
        for r in range(first_round, first_round + rounds):
            publish(r)
            i0, b0, got = t.index_bytes, t.body_bytes, 0
            for _ in range(int(round_seconds / poll_seconds)):
                now[0] += poll_seconds
                cur = int(now[0] // round_seconds)
                for d in await t.poll(range(max(first_round, cur - window), cur + 1), want):
                    t.admitted(d.publisher, d.round)  # as the exchange does with what it admits
                    got += 1
                if before:
                    t.swarm_size = 1.0  # the old index had one shard whatever the size
            per_round.append({"round": r - first_round, "index_bytes": t.index_bytes - i0,
                              "body_bytes": t.body_bytes - b0, "envelopes": got,
                              "estimate": round(t.swarm_size)})

    asyncio.run(go())
    steady = per_round[rounds // 2:]
    j_bytes = len(body) * j / groups
    read = sum(x["index_bytes"] for x in steady) / len(steady)
    fetched = sum(x["body_bytes"] for x in steady) / len(steady)
    biggest = max(replica.shard_bytes(k) for k in replica.store)
    return {"n": n, "design": "before" if before else "sharded", "refused_by_validator": replica.refused,
            "index_bytes_per_round": read, "body_bytes_per_round": fetched, "j_group_bytes": j_bytes,
            "ratio_to_j_groups": (read + fetched) / j_bytes, "largest_shard_bytes": biggest,
            "over_hivemind_2mib_reply": biggest > 2 * 1024 * 1024, "per_round": per_round}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--sizes", type=int, nargs="+", default=[1000, 10000])
    ap.add_argument("--rounds", type=int, default=12)
    ap.add_argument("--j", type=int, default=4, help="J: peer groups a step")
    ap.add_argument("--groups", type=int, default=4, help="I: groups in an honest envelope")
    ap.add_argument("--group-size", type=int, default=8)
    ap.add_argument("--tokens", type=int, default=48, help="completion tokens a record")
    ap.add_argument("--round-seconds", type=float, default=5.0)
    ap.add_argument("--poll-seconds", type=float, default=0.25)
    ap.add_argument("--window", type=int, default=4, help="max_round_lag")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", type=Path, default=ROOT / "docs" / "results")
    args = ap.parse_args()
    body, _ = honest_envelope(args.groups, args.group_size, args.tokens)
    rows = []
    for n in args.sizes:
        for before in (True, False):
            t0 = time.time()
            print(f"N={n} {'before' if before else 'sharded'}: signing and validating {n} peers' entries "
                  f"for {args.rounds} rounds, then polling ...", flush=True)
            res = run(n, before=before, rounds=args.rounds, j=args.j, groups=args.groups, body=body,
                      seed=args.seed, round_seconds=args.round_seconds, poll_seconds=args.poll_seconds,
                      window=args.window)
            print(f"  {res['ratio_to_j_groups']:.1f}x the J groups' bytes ({time.time() - t0:.0f} s)", flush=True)
            rows.append(res)
    result = {"command": command_line(), "args": {
        k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()}, "envelope_bytes": len(body),
        "results": rows}
    write_json(args.out / "bench_index_scale.json", result, indent=1, end="")
    print(write_markdown(args.out / "bench_index_scale.md", report(result)), end="")


def report(result: dict) -> list[str]:
    """The markdown report's lines, from the result as bench_index_scale.json holds it."""
    a, rows = result["args"], result["results"]
    return ["# Index scale: bytes a node reads and fetches per round", "",
            f"`{result['command']}` (simulated replica, real signing, validator, shard choice and fetch budget; "
            "see the script's docstring). Steady state: the mean of the second half of "
            f"{a['rounds']} rounds, the reader starting as a newcomer. J = {a['j']} groups a step; an honest "
            f"envelope holds {a['groups']} groups of {a['group_size']} ({result['envelope_bytes']} bytes), so the J "
            f"groups a step uses are {rows[0]['j_group_bytes']:.0f} bytes.", "",
            *markdown_table(
                ["peers", "index", "read/round", "fetched/round", "(read+fetched) / J groups", "largest shard",
                 "> 2 MiB reply"],
                [[r["n"], r["design"], f"{r['index_bytes_per_round'] / 1024:.1f} KiB",
                  f"{r['body_bytes_per_round'] / 1024:.1f} KiB", f"{r['ratio_to_j_groups']:.2f}x",
                  f"{r['largest_shard_bytes'] / 1024:.1f} KiB", "yes" if r["over_hivemind_2mib_reply"] else "no"]
                 for r in rows]),
            "", "`before` fetched at most 16 bodies a poll (the in-flight cap), 320 of the N a round: "
            "the whole index was read at every poll for every round of the window, and one read of a "
            "round at 10,000 peers is over hivemind's 2 MiB reply limit, so it could not work at all there.",
            "", "Size estimate of the reader (peers) by round, sharded index: " + "; ".join(
                f"N={r['n']}: " + ", ".join(str(x["estimate"]) for x in r["per_round"])
                for r in rows if r["design"] == "sharded")]


if __name__ == "__main__":
    main()
