"""What the py-libp2p transport tests share: loopback transports and exchanges, a hub with two
nodes that know only it, signed rollout envelopes, and waiting on a condition."""

from __future__ import annotations

import asyncio
import time

from swarm_node.node.clock import RoundClock
from swarm_node.node.swarm.exchange import SwarmExchange
from swarm_node.node.transport.libp2p.transport import Libp2pTransport
from swarm_node.protocol.codec import encode
from swarm_node.protocol.identity import Identity
from swarm_node.protocol.messages import RolloutBatch, RolloutRecord
from swarm_node.protocol.signing import envelope_to_bytes, sign

LOOPBACK = ["/ip4/127.0.0.1/tcp/0"]
VOCAB = 50


async def until(cond, timeout=20.0, what="condition"):
    deadline = time.monotonic() + timeout
    while True:
        got = cond()
        if asyncio.iscoroutine(got):
            got = await got
        if got:
            return got
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.05)


def transport(ident: Identity, bootstrap=(), **kw) -> Libp2pTransport:
    return Libp2pTransport(swarm="t", publisher=ident.peer_id, identity=ident, listen=LOOPBACK,
                           bootstrap=list(bootstrap), join_retries=0, startup_timeout=20, **kw)


def exchange(t, ident: Identity, clock: RoundClock) -> SwarmExchange:
    return SwarmExchange(t, ident, clock, tokenizer_fingerprint="tok", model_fingerprint="m", vocab_size=VOCAB,
                         decode_text=lambda ids: "".join(chr(97 + i % 26) for i in ids), poll_seconds=0.05)


async def hub_and_two(hub: Identity, left: Identity, right: Identity, clock: RoundClock):
    """Three started exchanges: ``hub``'s, and two that know only the hub (gossip between them
    goes through it). Returns (transport, exchange) for each, in that order."""
    h = transport(hub)
    eh = exchange(h, hub, clock)
    await eh.start()
    nodes = []
    for ident in (left, right):
        t = transport(ident, h.host.addrs, target_peers=1)
        ex = exchange(t, ident, clock)
        await ex.start()
        nodes.append((t, ex))
    return (h, eh), *nodes


def envelope(ident: Identity, r: int, seq: int = 1, records: int = 1, length: int = 3,
             task_id: str = "arithmetic:1:1") -> bytes:
    ids = tuple(1 + i % (VOCAB - 2) for i in range(length))
    rec = RolloutRecord(task_id=task_id, completion_ids=ids,
                        completion_text="".join(chr(97 + i % 26) for i in ids),
                        behaviour_logprobs=(-0.5,) * length, truncated=False)
    b = RolloutBatch(sender=ident.peer_id, round=r, policy_version=1, model_fingerprint="m",
                     tokenizer_fingerprint="tok", created_at=time.time(), rollouts=(rec,) * records)
    return envelope_to_bytes(sign(encode(b), ident, seq))
