"""The many-key attacks: fresh keys whose owner-signed index entries the Sybil writes each round,
pointing nowhere, at junk, at honest nodes, or at batches too large to be worth fetching.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import os
import time
from typing import TYPE_CHECKING, Callable

from swarm_node.node.sim.adversary.dht_entries import index_entries
from swarm_node.protocol.codec import encode
from swarm_node.protocol.errors import MessageTooLarge
from swarm_node.protocol.identity import Identity
from swarm_node.protocol.messages import MAX_MESSAGE_BYTES, RolloutRecord

if TYPE_CHECKING:
    from swarm_node.node.sim.adversary.peer import Adversary

log = logging.getLogger(__name__)

FLOOD_IDENTITIES = 200
HONEST_ADDRESS_IDENTITIES = 20
OVERSIZED_SENDERS = 4
OVERSIZED_TASKS = 64  # the most a batch may hold (MAX_GROUPS_PER_BATCH)
OVERSIZED_PER_TASK = 8  # 64 x 8 = 512 records, the most a batch may hold


def _random_p2p_id() -> str:
    """The libp2p id of an Ed25519 key nobody holds: a publisher that does not exist."""
    from hivemind.p2p import PeerID

    return PeerID(b"\x00\x24\x08\x01\x12\x20" + os.urandom(32)).to_base58()


async def _signed_junk(adv: Adversary, kind: str, r: int, n: int,
                       p2p_of: Callable[[int, str], tuple[str, int]]) -> None:
    """``n`` fresh keys, each an owner-signed index entry for round ``r`` at every shard level;
    ``p2p_of(k, peer_id)`` says where entry k points."""
    entries, fresh = [], []
    exp = time.time() + adv.entry_ttl
    for k in range(n):
        ident = Identity.generate()
        adv.sybil.add(ident)
        fresh.append(ident.peer_id)
        p2p, size = p2p_of(k, ident.peer_id)
        sha = hashlib.sha256(os.urandom(8)).hexdigest()
        entries += [(key, sk, v, exp) for key, sk, v in index_entries(adv.cfg.swarm.name, r, ident.peer_id,
                                                                      p2p, size, sha)]
    kept, refused = await adv.sybil.put(entries)
    for pid in fresh:  # signed once: the keys are not needed again
        adv.sybil.signer.forget(pid)
    adv.flood_keys += len(fresh)
    adv.count_store(kind, kept, refused)


async def flood(adv: Adversary, r: int) -> bool:
    """FLOOD_IDENTITIES fresh keys, each an owner-signed entry for round r: half point at
    peers that do not exist, half at us, answering with bytes that fail the sha256."""
    def where(k: int, peer_id: str) -> tuple[str, int]:
        if k % 2:
            adv.sybil.junk[(r, peer_id)] = 4096
            return adv.sybil.p2p_id, 4096
        return _random_p2p_id(), 4096

    await _signed_junk(adv, "flood", r, FLOOD_IDENTITIES, where)
    adv.sybil.prune(r - adv.cfg.swarm.max_round_lag - 2)
    return True


async def honest_address(adv: Adversary, r: int) -> bool:
    """Fresh keys whose owner-signed entries point at honest nodes' libp2p addresses."""
    targets = sorted(adv.honest_p2p.values())
    if not targets:
        return False
    await _signed_junk(adv, "honest_address", r, HONEST_ADDRESS_IDENTITIES,
                       lambda k, _: (targets[k % len(targets)], 2048))
    return True


def oversized_records(adv: Adversary) -> tuple[RolloutRecord, ...]:
    """512 valid records (64 tasks x 8) with as many tokens each as keep the encoded batch
    under MAX_MESSAGE_BYTES: ids in this vocabulary, no special token, text their decoding.
    Built once (seconds of tokenizer work) and kept on ``adv``."""
    if adv.oversized_records is not None:
        return adv.oversized_records
    tok = adv.forge.tok
    special = set(tok.all_special_ids)
    vocab = [t for t in range(len(tok)) if t not in special]
    base = adv.forge.ids("<answer>0</answer>", eos=False)
    tasks = [f"arithmetic:{900_000 + k}:1" for k in range(OVERSIZED_TASKS)]

    def build(n_tokens: int) -> tuple[RolloutRecord, ...]:
        recs = []
        for i, tid in enumerate(tasks):
            for j in range(OVERSIZED_PER_TASK):
                ids = list(base)
                k = i * 7919 + j * 104729
                while len(ids) < n_tokens - 1:
                    ids.append(vocab[k % len(vocab)])
                    k = k * 1103515245 + 12345 & 0x7FFFFFFF
                ids = tuple(ids) + (int(tok.eos_token_id),)
                text = tok.decode(list(ids), skip_special_tokens=True)
                while len(text) > 8192:  # the per-record text limit
                    ids = ids[:-2] + ids[-1:]
                    text = tok.decode(list(ids), skip_special_tokens=True)
                recs.append(RolloutRecord(tid, ids, text, tuple(-1.0 for _ in ids), False))
        return tuple(recs)

    def fits(recs) -> bool:
        try:
            return len(encode(adv.forge.batch_of(0, recs))) <= MAX_MESSAGE_BYTES - 4096
        except MessageTooLarge:
            return False

    lo, hi = 16, 1024
    best = build(lo)
    while lo < hi:  # the largest token count that fits the message limit (with 4 KiB to spare)
        mid = (lo + hi + 1) // 2
        recs = build(mid)
        if fits(recs):
            best, lo = recs, mid
        else:
            hi = mid - 1
    adv.oversized_records = best
    log.info("oversized batches: %d records of %d tokens, %d bytes", len(best), len(best[0].completion_ids),
             len(encode(adv.forge.batch_of(0, best))))
    return best


async def oversized(adv: Adversary, r: int) -> bool:
    """OVERSIZED_SENDERS keys, each a batch just under the message limit, served by us."""
    if not adv.oversized_senders:
        adv.oversized_senders = [Identity.generate() for _ in range(OVERSIZED_SENDERS)]
        for ident in adv.oversized_senders:
            adv.sybil.add(ident)
            adv.identities.append(ident.peer_id)
    records = await asyncio.to_thread(oversized_records, adv)
    entries = []
    exp = time.time() + adv.entry_ttl
    for ident in adv.oversized_senders:
        data = await asyncio.to_thread(
            lambda i=ident: adv.forge.seal(encode(adv.forge.batch_of(r, records, sender=i.peer_id)), i))
        adv.sybil.outbox[(r, ident.peer_id)] = data
        entries += [(k, sk, v, exp) for k, sk, v in index_entries(
            adv.cfg.swarm.name, r, ident.peer_id, adv.sybil.p2p_id, len(data), hashlib.sha256(data).hexdigest())]
    kept, refused = await adv.sybil.put(entries)
    adv.count_store("oversized", kept, refused)
    adv.published_groups(r, OVERSIZED_TASKS * len(adv.oversized_senders))
    adv.sybil.prune(r - adv.cfg.swarm.max_round_lag - 2)
    return True
