"""The swarm the latency and throughput benchmark runs: the batch a default node publishes each
round (generated for real), exchanges configured as the trainer configures them, and started
transports of each kind on loopback (memory, hivemind with its bootstrap DHT node, libp2p with its
bootstrap host)."""

from __future__ import annotations

import asyncio
import functools
import time
from typing import Callable

import torch

from swarm_node.node.clock import RoundClock
from swarm_node.node.config.config import NodeConfig
from swarm_node.node.run.rollouts import generate_rollouts, round_task_ids, to_records
from swarm_node.node.swarm.exchange import SwarmExchange
from swarm_node.node.transport.base import Transport
from swarm_node.node.transport.memory import MemoryHub, MemoryTransport
from swarm_node.policies.default_model import ensure_default_model
from swarm_node.policies.policy import Policy, SamplingParams
from swarm_node.protocol.identity import Identity
from swarm_node.protocol.messages import RolloutRecord
from swarm_node.rewards.scoring import RewardConfig

SWARM = "bench"
ROUND_SECONDS = 1.0  # the demo's round (docs/examples/swarm_demo.toml): one trial a round
NODE_POLL_SECONDS = NodeConfig().swarm.poll_seconds  # quoted in the report (0.25 s)
LOOPBACK = dict(host_maddrs=["/ip4/127.0.0.1/tcp/0"], use_relay=False, nat_port_map=False)
MESH_TIMEOUT_S = 60.0  # libp2p: gossipsub meshes form within a few heartbeats (1 s each)


def realistic_batch(seed: int) -> tuple[Policy, list[RolloutRecord], dict]:
    """One round's records as the trainer publishes them with the default config."""
    cfg = NodeConfig(swarm={"transport": "hivemind"})  # in a swarm a node generates I = 8 - J groups
    policy = Policy.load(str(ensure_default_model()))
    groups = cfg.local_groups
    g = cfg.generation.num_generations + (1 if cfg.learner.baseline == "median" else 0)
    params = SamplingParams(max_new_tokens=cfg.generation.max_completion_length,
                            temperature=cfg.generation.temperature, top_p=cfg.generation.top_p,
                            top_k=cfg.generation.top_k)
    torch.manual_seed(seed)
    task_ids = round_task_ids(seed, 0, groups, cfg.tasks.names, cfg.tasks.difficulties)
    records = to_records(generate_rollouts(policy, task_ids, g, params, 0, RewardConfig()))
    info = {"groups": groups, "completions_per_group": g, "records": len(records),
            "max_new_tokens": params.max_new_tokens,
            "completion_tokens": sum(len(r.completion_ids) for r in records)}
    return policy, records, info


def make_exchange(transport: Transport, identity: Identity, policy: Policy, clock: RoundClock,
                  poll: float, max_round_lag: int) -> SwarmExchange:
    """An exchange configured as ``node.run.trainer`` configures it."""
    tok = policy.tokenizer
    vocab = min(len(tok), policy.model.get_input_embeddings().num_embeddings)
    return SwarmExchange(transport, identity, clock, tokenizer_fingerprint=policy.tokenizer_fingerprint,
                         model_fingerprint=policy.model_fingerprint, vocab_size=vocab,
                         decode_text=lambda ids: tok.decode(list(ids), skip_special_tokens=True),
                         max_round_lag=max_round_lag, poll_seconds=poll)


async def make_transports(kind: str, ids: list[Identity]) -> tuple[list[Transport], Callable | None]:
    """A started transport of ``kind`` per identity, and what stops the bootstrap node (hivemind's
    DHT node, libp2p's host; None for memory)."""
    stop_boot = None
    if kind == "memory":
        hub = MemoryHub()
        ts = [MemoryTransport(swarm=SWARM, publisher=i.peer_id, hub=hub) for i in ids]
    elif kind == "hivemind":
        from swarm_node.node.transport.hivemind.records import bootstrap_validator
        from swarm_node.node.transport.hivemind.transport import HivemindTransport
        from swarm_node.node.transport.hivemind.daemon import start_dht_node, stop_dht_node

        boot = await start_dht_node(initial_peers=[], retries=0, record_validator=bootstrap_validator(), **LOOPBACK)
        stop_boot = functools.partial(stop_dht_node, boot)
        maddrs = [str(m) for m in await boot.p2p.get_visible_maddrs()]
        # round_seconds as the node passes it: the DHT record validator then checks these round keys;
        # each transport signs its records with its identity, as a node does.
        ts = [HivemindTransport(swarm=SWARM, publisher=i.peer_id, signer=i, initial_peers=maddrs, join_retries=0,
                                round_seconds=ROUND_SECONDS, **LOOPBACK) for i in ids]
    else:
        from swarm_node.node.transport.libp2p.transport import Libp2pTransport
        from swarm_node.node.transport.libp2p.host import Libp2pHost

        listen = LOOPBACK["host_maddrs"]
        boot = Libp2pHost(Identity.generate(), listen, [])  # joins no topic, as the libp2p bootstrap
        await boot.start()
        stop_boot = boot.close
        ts = [Libp2pTransport(swarm=SWARM, publisher=i.peer_id, identity=i, listen=listen, bootstrap=boot.addrs,
                              join_retries=0, round_seconds=ROUND_SECONDS) for i in ids]
    try:
        for t in ts:  # one after the other: each joiner finds the ones before it
            await t.start()
        if kind == "libp2p":
            await gossip_mesh_formed(ts)
    except BaseException:
        await close_all(ts, stop_boot)
        raise
    return ts, stop_boot


async def gossip_mesh_formed(ts: list[Transport]) -> None:
    """Until every libp2p node has min(N, D_low) peers in its rollouts mesh (gossipsub grafts up to
    D_low on its heartbeat): before that a publication may reach only part of the swarm."""
    from swarm_node.node.transport.libp2p.transport import gossip_topics

    topic = gossip_topics(SWARM)[0]
    deadline = time.monotonic() + MESH_TIMEOUT_S
    while True:
        sizes = [t.host.mesh_peers(topic) for t in ts]
        want = min(len(ts) - 1, ts[0].host.pubsub.router.degree_low)
        if min(sizes) >= want:
            return
        if time.monotonic() > deadline:
            raise RuntimeError(f"libp2p: gossipsub meshes of {sizes} peers after {MESH_TIMEOUT_S:g} s, "
                               f"wanted {want} each")
        await asyncio.sleep(0.05)


async def close_all(ts: list[Transport], stop_boot: Callable | None) -> None:
    """Close every transport and the bootstrap node: no p2pd (nor trio thread) may outlive the benchmark."""
    for t in ts:
        await t.close()
    if stop_boot is not None:
        await stop_boot()
