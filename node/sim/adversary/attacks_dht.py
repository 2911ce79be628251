"""The DHT write attacks: records planted around the index's rules (others' subkeys, plain
values, far expirations), each read back to count which replicas kept it.
"""

from __future__ import annotations

import hashlib
import time
from typing import TYPE_CHECKING

from swarm_node.node.sim.adversary.dht_entries import heartbeat_entries, index_entries
from swarm_node.protocol.identity import Identity

if TYPE_CHECKING:
    from swarm_node.node.sim.adversary.peer import Adversary

DISPLACE_AHEAD_S = 1800.0  # later than any owner's own expiration
FAR_AHEAD_S = 3 * 3600.0
WITHIN_HOUR_S = 50 * 60.0


async def displace(adv: Adversary, r: int) -> bool:
    """Raw client: under each honest peer's own subkey, at every shard level, an entry for
    this round and the next and a heartbeat, all expiring 30 min ahead (later than the
    owner's); then read back: no replica may return them."""
    victims = adv.owners()
    if not victims:
        return False
    swarm, junk = adv.cfg.swarm.name, b"not the victim's body"
    later = time.time() + DISPLACE_AHEAD_S
    records = []
    for victim in victims:
        for rr in (r, r + 1):
            for key, subkey, value in index_entries(swarm, rr, victim, adv.raw.p2p_id, len(junk),
                                                    hashlib.sha256(junk).hexdigest()):
                records.append((key, subkey, value, later))
        for key, subkey, value in heartbeat_entries(swarm, victim, b"dead"):
            records.append((key, subkey, value, later))
    kept = await adv.raw.put(records)
    adv.count_store("displace", sum(kept), len(kept) - sum(kept))
    return True


async def far_expiry(adv: Adversary, r: int) -> bool:
    """Raw client: plain values (no subkey: they would replace every entry of the key) under
    the next rounds' keys, where the honest peers' entries go, and under the heartbeat keys,
    and an unsigned entry of a fresh peer id, all expiring 3 h ahead. A fresh key: signed
    entries for the next round expiring 50 min and 3 h ahead."""
    swarm = adv.cfg.swarm.name
    far = time.time() + FAR_AHEAD_S
    owners = adv.owners() or [adv.identity.peer_id]
    plain = "junk planted far ahead"
    round_keys = {k for rr in range(r + 1, r + 4) for p in owners
                  for k, _, _ in index_entries(swarm, rr, p, "x", 1, "0" * 64)}
    hb_keys = {k for p in owners for k, _, _ in heartbeat_entries(swarm, p, b"")}
    fresh = Identity.generate().peer_id
    unsigned = index_entries(swarm, r + 1, fresh, adv.raw.p2p_id, 9, "0" * 64)
    groups = {"raw_plain": [(k, None, plain, far) for k in sorted(round_keys)],
              "raw_plain_heartbeat": [(k, None, plain, far) for k in sorted(hb_keys)],
              "raw_unsigned_entry": [(k, sk, v, far) for k, sk, v in unsigned]}
    for name, records in groups.items():
        kept = await adv.raw.put(records)
        adv.count_store(f"far_expiry:{name}", sum(kept), len(kept) - sum(kept))
    for name, ahead in (("signed_50min", WITHIN_HOUR_S), ("signed_3h", FAR_AHEAD_S)):
        ident = Identity.generate()
        adv.sybil.add(ident)
        entries = [(k, sk, v, time.time() + ahead)
                   for k, sk, v in index_entries(swarm, r + 1, ident.peer_id, adv.sybil.p2p_id, 9, "0" * 64)]
        await adv.sybil.put(entries)
        kept = await adv.raw.kept(entries, signed=True)  # the raw client sees every replica's
        adv.count_store(f"far_expiry:{name}", sum(kept), len(kept) - sum(kept))
        adv.sybil.signer.forget(ident.peer_id)
    return True
