"""The shard flood over the real hivemind DHT: a Sybil grinds keys into one honest peer's shard and
floods it every round, while that peer (the victim) and another (the receiver) exchange envelopes.

What it runs, all on 127.0.0.1 in one event loop (each DHT node with its own p2p daemon): a
bootstrap peer as ``swarm-node bootstrap`` runs it, two ``HivemindTransport``s doing what the
exchange does with them (node/swarm/exchange.py: publish one envelope and a heartbeat a round,
poll the window every quarter round for J = 4 groups' worth, ``want`` = 2, heartbeats every half
round, and vouch for the other's envelopes, as admission would), and the adversary's
``SybilNode`` (node/sim/adversary/sybil.py). ``grind_keys`` makes the Sybil's keys: fresh
Ed25519 identities whose id hash starts with the victim's first ``PREFIX_DIGITS`` hex digits, so
their entries may go into the victim's shards at levels 0 to 2 (the record validator keeps a key
in its own shard: only ground keys get there). In each flood round the Sybil stores one
owner-signed entry per key and level for that round (3 x keys signatures), pointing at its own
host, which answers with bytes that fail the sha256.

The run has phases of whole rounds: ``clean`` (no flood: the control), ``flood``, and ``after``
(the Sybil stopped: recovery). For each phase and direction it counts the rounds whose envelope
arrived within the window (victim -> receiver, receiver -> victim), the rounds in which each
heard the other's heartbeat, and each one's swarm-size estimate (min and max over the phase).
scripts/bench_shard_flood.py runs it and writes the report; tests/node/transport/hivemind/
test_shard_flood.py runs it shorter and asserts delivery.
"""

from __future__ import annotations

import asyncio
import os
import time
from dataclasses import dataclass, field

from swarm_node.node.sim.adversary.attacks_unusable import grind_keys
from swarm_node.protocol.identity import Identity

PREFIX_DIGITS = 2  # the victim's shard at levels 0-2: 1 in 256 fresh keys lands there
FLOOD_LEVELS = (0, 1, 2)
SWARM = "shardflood"
LOOPBACK = dict(host_maddrs=["/ip4/127.0.0.1/tcp/0"], use_relay=False, nat_port_map=False)
MAX_ROUND_LAG = 4  # the node's default window
WANT = 2  # envelopes_wanted(J = 4, 4 groups an envelope)


@dataclass
class Honest:
    """One honest peer's side: what it published, got and heard, round by round."""

    name: str
    ident: Identity
    transport: object = None
    got: dict = field(default_factory=dict)  # round of the other's envelope -> round it arrived
    heard: set = field(default_factory=set)  # rounds in which the other's heartbeat was heard
    estimates: dict = field(default_factory=dict)  # round -> (min, max) swarm-size estimate


@dataclass
class Phase:
    name: str
    rounds: int
    flood: bool


async def _start_transport(ident: Identity, maddrs: list[str], round_seconds: float):
    from swarm_node.node.transport.hivemind.transport import HivemindTransport

    t = HivemindTransport(swarm=SWARM, publisher=ident.peer_id, signer=ident, initial_peers=maddrs,
                          join_retries=2, round_seconds=round_seconds, **LOOPBACK)
    await t.start()
    return t


async def _honest_loop(me: Honest, other: Honest, first: int, last: int, round_seconds: float) -> None:
    """Rounds ``first`` .. ``last``: publish and announce at each round's start, poll every quarter
    round (heartbeats every half), admit the other's envelopes (``admitted``, as the exchange does)."""
    t, published, hb_polled = me.transport, None, 0.0
    while True:
        now = time.time()
        r = int(now // round_seconds)
        if r > last + MAX_ROUND_LAG:  # the last round's envelopes have had the whole window
            return
        if r != published and r <= last:
            body = f"{me.name}:{r}:".encode() + os.urandom(2048)
            await t.publish(r, body, (MAX_ROUND_LAG + 2) * round_seconds)
            await t.announce(f"{me.name}:hb:{r}".encode(), 3 * round_seconds)
            published = r
        for d in await t.poll(range(max(first, r - MAX_ROUND_LAG), min(r, last) + 1), WANT):
            if d.publisher == other.ident.peer_id and d.data.startswith(f"{other.name}:{d.round}:".encode()):
                me.got.setdefault(d.round, r)
                t.admitted(d.publisher, d.round)  # as the exchange does with what it admits
        if now - hb_polled >= round_seconds / 2:
            hb_polled = now
            if any(d.publisher == other.ident.peer_id for d in await t.poll_announcements()):
                me.heard.add(r)
        lo, hi = me.estimates.get(r, (t.swarm_size, t.swarm_size))
        me.estimates[r] = (min(lo, t.swarm_size), max(hi, t.swarm_size))
        await asyncio.sleep(max(0.0, round_seconds / 4 - (time.time() - now)))


async def _flood_loop(sybil, keys: list[Identity], rounds: set[int], round_seconds: float, counts: dict) -> None:
    """In each round of ``rounds``: one owner-signed entry per key and level, pointing at the
    Sybil's host (junk bodies)."""
    import hashlib

    from swarm_node.node.transport.hivemind.index import shard_prefix
    from swarm_node.node.transport.hivemind.index_records import index_entry

    done = set()
    while done != rounds:
        r = int(time.time() // round_seconds)
        if r in rounds and r not in done:
            exp = time.time() + (MAX_ROUND_LAG + 2) * round_seconds
            entries = []
            for ident in keys:
                sybil.junk[(r, ident.peer_id)] = 2048
                sha = hashlib.sha256(os.urandom(8)).hexdigest()
                entries += [(*index_entry(SWARM, r, ident.peer_id, sybil.p2p_id, 2048, sha,
                                          shard_prefix(ident.peer_id, lv)), exp) for lv in FLOOD_LEVELS]
            kept, refused = await sybil.put(entries)
            counts["kept"] = counts.get("kept", 0) + kept
            counts["refused"] = counts.get("refused", 0) + refused
            sybil.prune(r - MAX_ROUND_LAG - 2)
            done.add(r)
        elif r > max(rounds):
            return
        await asyncio.sleep(round_seconds / 8)


async def run_shard_flood(phases: list[Phase], n_keys: int = 160, round_seconds: float = 3.0,
                          say=print) -> dict:
    """Run the phases back to back in one swarm; returns what each honest peer measured per phase."""
    from swarm_node.node.sim.adversary.sybil import SybilNode
    from swarm_node.node.transport.hivemind.daemon import start_dht_node, stop_dht_node
    from swarm_node.node.transport.hivemind.index import peer_hash
    from swarm_node.node.transport.hivemind.records import bootstrap_validator

    victim, receiver = Honest("victim", Identity.generate()), Honest("receiver", Identity.generate())
    t0 = time.time()
    keys = grind_keys(peer_hash(victim.ident.peer_id)[:PREFIX_DIGITS], n_keys) if n_keys else []
    grind_s = time.time() - t0
    say(f"ground {len(keys)} keys into the victim's shard {peer_hash(victim.ident.peer_id)[:PREFIX_DIGITS]!r} "
        f"in {grind_s:.1f} s")
    boot = await start_dht_node(initial_peers=[], retries=0, record_validator=bootstrap_validator(), **LOOPBACK)
    sybil, counts = None, {}
    try:
        maddrs = [str(m) for m in await boot.p2p.get_visible_maddrs()]
        victim.transport = await _start_transport(victim.ident, maddrs, round_seconds)
        receiver.transport = await _start_transport(receiver.ident, maddrs, round_seconds)
        if any(p.flood for p in phases):
            sybil = SybilNode(SWARM, round_seconds, MAX_ROUND_LAG, dict(initial_peers=maddrs, **LOOPBACK))
            await sybil.start()
            for ident in keys:
                sybil.add(ident)
        first = int(time.time() // round_seconds) + 1
        spans, r = {}, first
        for p in phases:
            spans[p.name] = range(r, r + p.rounds)
            r += p.rounds
        last = r - 1
        flood_rounds = {x for p in phases if p.flood for x in spans[p.name]}
        say(f"rounds {first}..{last} of {round_seconds:g} s: " +
            ", ".join(f"{p.name} {p.rounds}" for p in phases))
        tasks = [_honest_loop(victim, receiver, first, last, round_seconds),
                 _honest_loop(receiver, victim, first, last, round_seconds)]
        if flood_rounds:
            tasks.append(_flood_loop(sybil, keys, flood_rounds, round_seconds, counts))
        await asyncio.gather(*tasks)
    finally:
        for h in (victim, receiver):
            if h.transport is not None:
                await h.transport.close()
        if sybil is not None:
            await sybil.close()
        await stop_dht_node(boot)
    out = {"keys": len(keys), "grind_s": grind_s, "round_seconds": round_seconds,
           "sybil_entries": counts, "phases": {}}
    for p in phases:
        span = spans[p.name]
        row = {"rounds": len(span), "flood": p.flood}
        for me, other in ((receiver, victim), (victim, receiver)):
            row[f"{other.name}_to_{me.name}"] = sum(x in me.got for x in span) / len(span)
            row[f"{other.name}_to_{me.name}_missed"] = [x - span.start for x in span if x not in me.got]
            row[f"{me.name}_heard"] = sum(x in me.heard for x in span) / len(span)
            ests = [me.estimates[x] for x in span if x in me.estimates]
            row[f"{me.name}_estimate"] = (round(min(e[0] for e in ests)), round(max(e[1] for e in ests))) \
                if ests else None
        out["phases"][p.name] = row
    return out
