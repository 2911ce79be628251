"""``swarm-node adversary``: join the swarm under an identity of its own and attack until stopped."""

from __future__ import annotations

import asyncio
import logging
import signal
from pathlib import Path

from swarm_node.node.errors import ConfigError
from swarm_node.node.config.config import NodeConfig
from swarm_node.node.sim.adversary.attacks_sybil import oversized_records
from swarm_node.node.sim.adversary.client import RawClient
from swarm_node.node.sim.adversary.peer import Adversary
from swarm_node.node.sim.adversary.registry import ATTACKS, RAW_ATTACKS, SYBIL_ATTACKS
from swarm_node.node.sim.adversary.sybil import SybilNode
from swarm_node.node.transport.carriers import CARRIERS
from swarm_node.node.transport.from_config import transport_from_config
from swarm_node.protocol.identity import load_or_create_identity

log = logging.getLogger(__name__)


async def run_adversary(cfg: NodeConfig, attacks: list[str]) -> int:
    from swarm_node.node.config.policy_loader import load_policy
    from swarm_node.node.run.wiring import identity_path

    unknown = [a for a in attacks if a not in ATTACKS]
    if unknown or not attacks:
        raise ConfigError(f"unknown attacks {unknown}; choose from {', '.join(ATTACKS)}")
    sc = cfg.swarm
    needs_dht = [a for a in attacks if a in RAW_ATTACKS + SYBIL_ATTACKS]
    has_dht = sc.transport in CARRIERS and CARRIERS[sc.transport].has_dht_index  # "none": refused at build
    if needs_dht and not has_dht:
        raise ConfigError(f"attacks {needs_dht} write into the hivemind DHT: join with --bootstrap "
                          f"(over {sc.transport}, the envelope attacks apply: {', '.join(a for a in ATTACKS if a not in RAW_ATTACKS + SYBIL_ATTACKS)})")
    out = Path(cfg.run.dir)
    out.mkdir(parents=True, exist_ok=True)
    policy = await asyncio.to_thread(load_policy, cfg)  # only its tokenizer and fingerprints are used
    ident = load_or_create_identity(identity_path(cfg))
    transport = transport_from_config(sc, ident)
    await transport.start()
    raw = sybil = None
    try:
        if any(a in RAW_ATTACKS for a in attacks):
            raw = RawClient(sc.initial_peers, sc.host_maddrs, sc.use_relay, sc.nat_port_map)
            await raw.start()
        if any(a in SYBIL_ATTACKS for a in attacks):
            sybil = SybilNode(sc.name, sc.round_seconds, sc.max_round_lag,
                              dict(initial_peers=sc.initial_peers, host_maddrs=sc.host_maddrs,
                                   startup_timeout=sc.startup_timeout, use_relay=sc.use_relay,
                                   nat_port_map=sc.nat_port_map))
            await sybil.start()
        adv = Adversary(cfg, ident, transport, policy.tokenizer, policy.tokenizer_fingerprint,
                        policy.model_fingerprint, attacks, out, raw=raw, sybil=sybil)
        if "oversized" in attacks:  # seconds of tokenizer work: before the first round, not in it
            await asyncio.to_thread(oversized_records, adv)
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, stop.set)
        log.info("adversary %s joined swarm %r; attacks: %s", ident.peer_id, sc.name, ", ".join(attacks))
        try:
            await adv.run(stop)
        finally:
            adv.write_status()
    finally:
        for extra in (raw, sybil):
            if extra is not None:
                await extra.close()
        await transport.close()
    return 0
