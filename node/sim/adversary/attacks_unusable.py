"""Floods of what no honest node can use, or of entries where one peer reads: valid batches of task
families nobody has, and keys ground into one honest peer's index shard.

``unknown_family``: the adversary's own key publishes, every round, a valid signed batch whose
every group is of a family nobody loaded (what an honest peer on another dataset, or another
version of it, sends: rewards/sources.py). Honest nodes never pool it (``unusable_batches``, no
rejection) and, over hivemind, back the key off after a run of such rounds
(``unusable_backed_off``, node/swarm/unusable.py).

``unknown_family_flood`` (hivemind): ``UNUSABLE_IDENTITIES`` fresh keys a round, each an
owner-signed index entry for such a batch, served by the Sybil: each body hashes right and
passes every check but the last, and each key sends one round, so no run builds up: what bounds
it is the fetch budget (publishers with a verified history first; unknown ones get what is left,
and a node that knows enough publishers explores one every few rounds).

``shard_flood`` (hivemind): keys ground so that their entries land in one honest peer's shard
(``SHARD_KEYS`` of them, its first ``SHARD_PREFIX_DIGITS`` hex digits), each an entry a round at
levels 0-2 pointing at junk: the peer's readers must still find its own entry there
(scripts/bench_shard_flood.py measures the same attack in isolation).
"""

from __future__ import annotations

import asyncio
import hashlib
import os
import time
from typing import TYPE_CHECKING

from swarm_node.node.sim.adversary.dht_entries import index_entries
from swarm_node.protocol.codec import encode
from swarm_node.protocol.identity import Identity

if TYPE_CHECKING:
    from swarm_node.node.sim.adversary.peer import Adversary

UNUSABLE_IDENTITIES = 16  # fresh keys a round in unknown_family_flood
UNUSABLE_GROUPS = 4  # groups a batch, 2 completions each
SHARD_KEYS = 64  # ground keys in the victim's shard (shard_flood)
SHARD_PREFIX_DIGITS = 2  # 1 in 256 fresh keys lands there: ~15 ms of grinding a key
SHARD_LEVELS = (0, 1, 2)


def unknown_family_name(r: int) -> str:
    """A well-formed family name nobody registered: a dataset's ``<stem>_<digest>``, the digest
    changing with the round (as a peer editing its data would)."""
    return "otherdata_" + hashlib.sha256(f"unknown-family:{r}".encode()).hexdigest()[:8]


def _unusable_payload(adv: Adversary, r: int, sender: str) -> bytes:
    """A valid batch of ``UNUSABLE_GROUPS`` groups of an unknown family: right tokens, right text."""
    ids = adv.forge.ids("<answer>7</answer>")
    fam = unknown_family_name(r)
    recs = [adv.forge.record(f"{fam}:{1000 * r + k}:1", ids, -1.0) for k in range(UNUSABLE_GROUPS) for _ in range(2)]
    return encode(adv.forge.batch_of(r, recs, sender=sender))


async def unknown_family(adv: Adversary, r: int) -> bool:
    """A valid batch of nothing but unknown families, under the adversary's own key."""
    return await adv.publish(r, adv.forge.seal(_unusable_payload(adv, r, adv.identity.peer_id)))


async def unknown_family_flood(adv: Adversary, r: int) -> bool:
    """``UNUSABLE_IDENTITIES`` fresh keys, each a valid unusable batch served by the Sybil."""
    entries, exp = [], time.time() + adv.entry_ttl
    for _ in range(UNUSABLE_IDENTITIES):
        ident = Identity.generate()
        adv.sybil.add(ident)
        data = await asyncio.to_thread(lambda i=ident: adv.forge.seal(_unusable_payload(adv, r, i.peer_id), i))
        adv.sybil.outbox[(r, ident.peer_id)] = data
        entries += [(k, sk, v, exp) for k, sk, v in index_entries(
            adv.cfg.swarm.name, r, ident.peer_id, adv.sybil.p2p_id, len(data), hashlib.sha256(data).hexdigest())]
    kept, refused = await adv.sybil.put(entries)
    adv.flood_keys += UNUSABLE_IDENTITIES
    adv.count_store("unknown_family_flood", kept, refused)
    adv.sybil.prune(r - adv.cfg.swarm.max_round_lag - 2)
    return True


def grind_keys(prefix: str, n: int) -> list[Identity]:
    """``n`` fresh identities whose peer-id hash starts with ``prefix`` (16**len(prefix) tries each)."""
    from swarm_node.node.transport.hivemind.index import peer_hash

    keys = []
    while len(keys) < n:
        ident = Identity.generate()
        if peer_hash(ident.peer_id).startswith(prefix):
            keys.append(ident)
    return keys


async def shard_flood(adv: Adversary, r: int) -> bool:
    """``SHARD_KEYS`` keys ground into the first honest peer's shard, an entry each a round at
    levels 0-2, pointing at the Sybil, which answers with bytes that fail the sha256."""
    from swarm_node.node.transport.hivemind.index import peer_hash

    if not adv.shard_keys:
        victim = min(adv.honest_p2p, default=None)  # one victim for the run (the lowest id: stable)
        if victim is None:
            return False
        adv.shard_victim = victim
        adv.shard_keys = await asyncio.to_thread(grind_keys, peer_hash(victim)[:SHARD_PREFIX_DIGITS], SHARD_KEYS)
        for ident in adv.shard_keys:
            adv.sybil.add(ident)
    entries, exp = [], time.time() + adv.entry_ttl
    for ident in adv.shard_keys:
        adv.sybil.junk[(r, ident.peer_id)] = 2048
        sha = hashlib.sha256(os.urandom(8)).hexdigest()
        entries += [(k, sk, v, exp) for k, sk, v in index_entries(
            adv.cfg.swarm.name, r, ident.peer_id, adv.sybil.p2p_id, 2048, sha, levels=SHARD_LEVELS)]
    kept, refused = await adv.sybil.put(entries)
    adv.count_store("shard_flood", kept, refused)
    adv.sybil.prune(r - adv.cfg.swarm.max_round_lag - 2)
    return True
