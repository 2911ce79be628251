"""Forging: the adversary's batches, records and envelopes, well-formed and signed, before the lie.

Each attack starts from what an honest node would send (``Forger``) and then breaks one thing.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any, Iterable

import msgpack

from swarm_node.protocol.codec import encode
from swarm_node.protocol.identity import Identity
from swarm_node.protocol.messages import RolloutBatch, RolloutRecord
from swarm_node.protocol.signing import envelope_to_bytes, next_seq, sign
from swarm_node.rewards.registry import make_task


def round_task_id(r: int) -> str:
    """The one task the single-task attacks of round ``r`` answer."""
    return f"arithmetic:{r % 1000}:1"


def round_answer(r: int) -> str:
    return make_task(round_task_id(r)).answer


def task_ids(r: int, n: int) -> list[str]:
    """``n`` tasks of round ``r`` for the multi-group attacks."""
    return [f"arithmetic:{(r * 16 + k) % 10**9}:1" for k in range(n)]


def with_field(batch: RolloutBatch, name: str, value: Any) -> bytes:
    """``batch`` encoded with a field the protocol does not have added to every record."""
    obj = msgpack.unpackb(encode(batch), raw=False)
    for rec in obj["body"]["rollouts"]:
        rec[name] = value
    return msgpack.packb(obj, use_bin_type=True)


@dataclass
class Forger:
    """What forging needs of the adversary: its tokenizer, key and fingerprints, and the last
    sequence number it signed with."""

    tok: Any = field(repr=False)
    identity: Identity
    tokenizer_fingerprint: str
    model_fingerprint: str
    seq: int = 0

    def next_seq(self) -> int:
        self.seq = next_seq(self.seq)  # the honest rule (protocol/signing.py)
        return self.seq

    def ids(self, text: str, eos: bool = True) -> tuple[int, ...]:
        ids = tuple(self.tok(text, add_special_tokens=False)["input_ids"])
        return ids + ((int(self.tok.eos_token_id),) if eos else ())

    def record(self, task_id: str, ids: tuple[int, ...], lp: float, text: str | None = None) -> RolloutRecord:
        text = self.tok.decode(list(ids), skip_special_tokens=True) if text is None else text
        return RolloutRecord(task_id, ids, text, tuple(lp for _ in ids), False)

    def batch(self, r: int, text: str, sender: str | None = None, lp: float = -1.0,
              created_at: float | None = None) -> RolloutBatch:
        """Two copies of ``text`` as the completion of round ``r``'s task."""
        rec = self.record(str(make_task(round_task_id(r)).id), self.ids(text), lp)
        return self.batch_of(r, (rec, rec), sender=sender, created_at=created_at)

    def batch_of(self, r: int, records: Iterable[RolloutRecord], sender: str | None = None,
                 fingerprint: str | None = None, created_at: float | None = None) -> RolloutBatch:
        return RolloutBatch(sender=sender or self.identity.peer_id, round=r, policy_version=0,
                            model_fingerprint=self.model_fingerprint,
                            tokenizer_fingerprint=fingerprint or self.tokenizer_fingerprint,
                            created_at=time.time() if created_at is None else created_at,
                            rollouts=tuple(records))

    def seal(self, payload: bytes, ident: Identity | None = None) -> bytes:
        """``payload`` in an envelope signed by ``ident`` (default: the adversary's own key)."""
        return envelope_to_bytes(sign(payload, ident or self.identity, self.next_seq()))
