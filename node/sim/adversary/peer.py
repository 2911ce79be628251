"""The hostile peer: what it knows, what it counts, and its round loop (one attack a round).

The attacks themselves are functions of this peer (``registry.ATTACK_FUNCTIONS``); this module
holds their shared state, what they learn about the honest peers, and ``status.json``.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from pathlib import Path

from swarm_node.node.clock import RoundClock
from swarm_node.node.config.config import NodeConfig
from swarm_node.node.sim.adversary.client import RawClient
from swarm_node.node.sim.adversary.forge import Forger
from swarm_node.node.sim.adversary.registry import ATTACK_FUNCTIONS, ATTACKS
from swarm_node.node.sim.adversary.sybil import SybilNode
from swarm_node.node.swarm.limits import envelope_ttl, heartbeat_ttl
from swarm_node.node.transport import Transport
from swarm_node.node.transport.addresses import peer_id_of
from swarm_node.protocol.codec import decode
from swarm_node.protocol.identity import Identity
from swarm_node.protocol.messages import Announcement, RolloutRecord
from swarm_node.protocol.signing import envelope_from_bytes

log = logging.getLogger(__name__)


class Adversary:
    """One hostile peer: its own key and transport, a forger, the raw client and the Sybil (for
    the DHT attacks), what it learnt about the honest peers and what it counted."""

    def __init__(self, cfg: NodeConfig, identity: Identity, transport: Transport, tokenizer,
                 tokenizer_fingerprint: str, model_fingerprint: str, attacks: list[str], out: Path,
                 raw: RawClient | None = None, sybil: SybilNode | None = None):
        self.cfg = cfg
        self.identity = identity
        self.transport = transport
        self.forge = Forger(tokenizer, identity, tokenizer_fingerprint, model_fingerprint)
        self.attacks = attacks
        self.out = out
        self.raw = raw
        self.sybil = sybil
        self.clock = RoundClock(cfg.swarm.round_seconds)
        self.sent: dict[str, int] = {a: 0 for a in attacks}
        self.refused: dict[str, int] = {a: 0 for a in attacks}  # attacks the transport would not carry
        self.stores: dict[str, dict[str, int]] = {}  # attack -> {"kept": n, "refused": n} (DHT writes)
        self.victims: dict[str, dict[int, bytes]] = {}  # peer -> {round: envelope}, recent rounds only
        self.honest_p2p: dict[str, str] = {}  # honest peer id -> its libp2p id (from its heartbeat)
        self.identities: list[str] = [identity.peer_id]  # keys whose envelopes may be admitted
        self.groups_by_round: dict[int, int] = {}  # groups of admitted-by-design attacks published
        self.flood_keys = 0  # fresh keys used by flood / honest_address
        self.oversized_senders: list[Identity] = []
        self.oversized_records: tuple[RolloutRecord, ...] | None = None  # built once (seconds of work)
        self.created_at_turn = 0  # future_created_at: batch, then heartbeat
        self.shard_victim: str | None = None  # shard_flood: the honest peer whose shard is flooded
        self.shard_keys: list[Identity] = []  # shard_flood: keys ground into its shard (once)

    # -- what the attacks share ------------------------------------------------------------------
    @property
    def publish_ttl(self) -> float:
        """How long an attack's envelope or heartbeat stays published."""
        return heartbeat_ttl(self.clock.round_seconds)

    @property
    def entry_ttl(self) -> float:
        """How long a Sybil's index entry lives: as long as an honest node's (max_round_lag + 2 rounds)."""
        return envelope_ttl(self.cfg.swarm.max_round_lag, self.clock.round_seconds)

    async def publish(self, r: int, data: bytes) -> bool:
        """Publish ``data`` as this peer's envelope for round ``r``."""
        await self.transport.publish(r, data, self.publish_ttl)
        return True

    def owners(self) -> list[str]:
        """Every honest peer seen: by an envelope or by a heartbeat."""
        return sorted(set(self.victims) | set(self.honest_p2p))

    def count_store(self, kind: str, kept: int, refused: int) -> None:
        s = self.stores.setdefault(kind, {"kept": 0, "refused": 0})
        s["kept"] += kept
        s["refused"] += refused

    def published_groups(self, r: int, n: int) -> None:
        self.groups_by_round[r] = self.groups_by_round.get(r, 0) + n

    # -- the round loop --------------------------------------------------------------------------
    async def attack(self, kind: str, r: int) -> bool:
        """Publish one hostile message of ``kind`` for round ``r``; False if it had nothing to send."""
        fn = ATTACK_FUNCTIONS.get(kind)
        if fn is None:
            raise ValueError(f"unknown attack {kind!r}; choose from {ATTACKS}")
        return await fn(self, r)

    async def learn_victims(self) -> None:
        """Honest peers' ids and libp2p addresses from their heartbeats; for impersonation and
        replay, also the last few rounds' envelopes of each."""
        for d in await self.transport.poll_announcements():
            env = envelope_from_bytes(d.data)
            if env is None or env.sender != d.publisher:
                continue
            try:
                hb = decode(env.payload)
            except Exception:  # noqa: BLE001 - only honest heartbeats matter here
                continue
            if isinstance(hb, Announcement):
                for a in hb.addrs:
                    if (p2p := peer_id_of(a)) is not None:
                        self.honest_p2p[d.publisher] = p2p
        if not {"impersonation", "replay"} & set(self.attacks):
            return
        r = self.clock.current()
        for d in await self.transport.poll(range(max(0, r - 2), r + 1)):
            env = envelope_from_bytes(d.data)
            if env is not None and env.sender == d.publisher:
                self.victims.setdefault(d.publisher, {})[d.round] = d.data
        for by_round in self.victims.values():
            for old in [rr for rr in by_round if rr < r - 4]:
                del by_round[old]

    def write_status(self) -> None:
        status = {"adversary": True, "peer_id": self.identity.peer_id, "attacks": self.attacks,
                  "sent": self.sent, "refused": self.refused, "stores": self.stores,
                  "identities": self.identities, "groups_by_round": self.groups_by_round,
                  "fresh_keys": self.flood_keys, "served": self.sybil.served if self.sybil else 0,
                  "victims": self.owners(), "updated_at": time.time()}
        tmp = self.out / "status.json.tmp"
        tmp.write_text(json.dumps(status, indent=2))
        tmp.replace(self.out / "status.json")

    async def run(self, stop: asyncio.Event) -> None:
        i = 0
        last = -1
        while not stop.is_set():
            r = self.clock.current()
            if r != last:
                last = r
                try:
                    await self.learn_victims()
                except Exception as e:  # noqa: BLE001 - the network comes and goes
                    log.warning("learning the honest peers failed: %s: %s", type(e).__name__, e)
                for _ in range(len(self.attacks)):  # skip attacks that have nothing to use yet
                    kind = self.attacks[i % len(self.attacks)]
                    i += 1
                    try:
                        if await self.attack(kind, r):
                            self.sent[kind] += 1
                            log.info("round %d: sent %s", r, kind)
                            break
                    except Exception as e:  # noqa: BLE001 - a failed attack is not our problem
                        log.warning("attack %s failed: %s: %s", kind, type(e).__name__, e)
                        break
                self.write_status()
            try:
                await asyncio.wait_for(stop.wait(), timeout=self.clock.round_seconds / 4)
            except asyncio.TimeoutError:
                pass
