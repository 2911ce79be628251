"""An exchange over the in-memory transport and the messages its tests send it: batches, records
and envelopes built by hand, a stand-in tokenizer, a clock set to a chosen round."""

from __future__ import annotations

import time

import msgpack

from swarm_node.node.clock import RoundClock
from swarm_node.node.swarm.exchange import SwarmExchange
from swarm_node.node.transport.memory import MemoryHub, MemoryTransport
from swarm_node.protocol.identity import Identity
from swarm_node.protocol.messages import RolloutBatch, RolloutRecord
from swarm_node.protocol.signing import envelope_to_bytes, sign

VOCAB = 50
TOK_FP = "tok-fp"


def decode_text(ids) -> str:
    # A stand-in tokenizer: one letter per id (the real one is used in test_attacks.py).
    return "".join(chr(97 + i % 26) for i in ids)


def clock_at(r: int, round_seconds: float = 10.0) -> RoundClock:
    t = time.time()
    # An epoch that puts the current time in the middle of round r.
    return RoundClock(round_seconds, epoch=t - (r + 0.5) * round_seconds)


def make_exchange(hub: MemoryHub, ident: Identity, clock: RoundClock, **kw) -> SwarmExchange:
    t = MemoryTransport(swarm="s", publisher=ident.peer_id, hub=hub)
    return SwarmExchange(t, ident, clock, tokenizer_fingerprint=TOK_FP, model_fingerprint="m",
                         vocab_size=VOCAB, decode_text=decode_text, poll_seconds=0.01, **kw)


def record(task="arithmetic:1:1", ids=(1, 2, 3)) -> RolloutRecord:
    return RolloutRecord(task_id=task, completion_ids=tuple(ids), completion_text=decode_text(ids),
                         behaviour_logprobs=tuple(-0.5 for _ in ids), truncated=False)


def batch(ident: Identity, r: int, records=None, **over) -> RolloutBatch:
    fields = dict(sender=ident.peer_id, round=r, policy_version=3, model_fingerprint="m",
                  tokenizer_fingerprint=TOK_FP, created_at=time.time(),
                  rollouts=tuple(records or [record("arithmetic:1:1"), record("arithmetic:1:1", (4, 5)),
                                             record("lists:2:1")]))
    fields.update(over)
    return RolloutBatch(**fields)


def envelope(ident: Identity, payload: bytes, seq: int = 1, now: float | None = None) -> bytes:
    return envelope_to_bytes(sign(payload, ident, seq, now=now))


def tamper_body(payload: bytes, fn) -> bytes:
    obj = msgpack.unpackb(payload, raw=False)
    fn(obj)
    return msgpack.packb(obj, use_bin_type=True)
