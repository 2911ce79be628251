"""A malicious peer for simulations: it joins a swarm and, every round, publishes hostile messages.

``swarm-node adversary`` (used by ``swarm-node sim`` for a ``[[malicious]]`` fault) joins like a
node, with its own identity, and cycles through the attacks below, one per round (``--attacks``;
``all`` is every one of them). Honest nodes must refuse each and count it where the table says,
and never train on it; the simulator's summary checks that nothing the adversary sent under its
own id was trained on. The attacks marked *admitted by design* pass admission (a peer may send
them honestly); the table says what they must not do instead, and their groups are trained on.
``scripts/bench_attacks.py`` runs each attack against an honest swarm and compares what the
honest nodes measured with a run without it (docs/results/attacks.md).

Envelope attacks, signed by the adversary's own key and published under its own index entry::

    garbage          random bytes instead of an envelope             malformed_envelope
    bad_signature    a well-formed batch whose signature is broken    bad_signature
    forged_reward    a batch whose records carry a "reward" field    unknown_field
    forged_truth     a batch whose records carry a "ground_truth"    unknown_field
    text_mismatch    the right answer as text over other token ids   text_mismatch
    impersonation    a batch signed by the adversary, naming a peer  sender_mismatch
    replay           an honest peer's old envelope again, under that peer's index
                     subkey for the previous round                   replay (memory transport);
                                                                     over hivemind the owner-signed
                                                                     index refuses the write
    logprob_1e300    every token's log-prob is -1e300 (-inf in
                     float32: NaN steps for the learner)             implausible_logprob
    logprob_1e4      every token's log-prob is -1e4                  implausible_logprob
    special_tokens   a <pad> in the middle of each completion        special_tokens
    future_created_at  created_at an hour ahead of the signed time (a batch, then a
                     heartbeat, in turn)                             created_at_mismatch
    foreign_logprob_gap  another tokenizer fingerprint, right and wrong answers, each token
                     claimed at log-prob -100: Σ log μ far below Σ log π
                                                                     admitted by design: the row's
                                                                     weight is capped at 1 + ε_high,
                                                                     so ρ and the LR barely move
    zero_advantage   groups of identical completions (one reward: advantage 0) whose
                     tokens are claimed certain (log μ = 0, so w = π ≪ 1)
                                                                     admitted by design: rows with
                                                                     no gradient do not enter ρ

DHT attacks. Index entries go where the transport writes them (``index_entries``: with the
sharded index, the writer's shard at levels 0 and 1, where readers of a swarm of up to ~500 peers
read; else the one key per round of docs/protocol.md)::

    displace         a raw hivemind client (hivemind.DHTNode, none of this project's classes)
                     stores, under each honest peer's own subkey, index entries for this round
                     and the next and heartbeats, all expiring 30 min ahead (later than the
                     owner's), then reads them back                  refused by every replica
                                                                     (read back: 0 kept)
    far_expiry       a raw client plants plain values (no subkey: they would replace every
                     entry of the key) under the next rounds' keys and the heartbeat keys, and
                     an unsigned peer-id entry, all expiring 3 h ahead; a fresh key plants
                     owner-signed entries expiring 50 min and 3 h ahead
                                                                     refused by every replica,
                                                                     but the 50-min signed entry,
                                                                     which the bootstrap peer keeps
                                                                     (it knows no round length;
                                                                     the nodes refuse it)
    flood            FLOOD_IDENTITIES (200) fresh keys a round, each an owner-signed index
                     entry for the round: half point at libp2p peers that do not exist, half
                     at the adversary, which answers with bytes that fail the sha256
                                                                     hash_mismatch (+ backed_off),
                                                                     fetch_failures
    honest_address   HONEST_ADDRESS_IDENTITIES (20) fresh keys a round, each an owner-signed
                     entry pointing at an honest node's libp2p address
                                                                     refused_requests (the honest
                                                                     node serves only its own body)
    oversized        OVERSIZED_SENDERS (4) keys, each a valid batch a round: 64 tasks x 8
                     completions of ~600 tokens (in vocabulary, no special token, text their
                     decoding), just under the 4 MiB message limit  oversized: larger than all a
                                                                     receiver could use (node/swarm/exchange.py
                                                                     usable_envelope_bytes), so not
                                                                     fetched

It trains nothing. Its ``status.json`` counts what it sent, by attack, what the transport
refused to carry (``refused``), DHT stores by attack and outcome (``stores``: ``kept`` or
``refused``), every key whose envelopes can be admitted (``identities``: its own and the
oversized senders') and the groups of admitted-by-design attacks it published per round
(``groups_by_round``).

The DHT attacks write index entries with ``index_entry`` from ``node.transport.hivemind.transport``
when it exists (the index layout's one definition), else with the layout of docs/protocol.md.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
import os
import signal
import struct
import time
from pathlib import Path

import msgpack

from node.clock import RoundClock
from node.run.config import NodeConfig
from node.errors import ConfigError
from node.transport import Transport
from node.transport.from_config import transport_from_config
from protocol.codec import decode, encode
from protocol.errors import MessageTooLarge
from protocol.identity import Identity, load_or_create_identity
from protocol.messages import MAX_MESSAGE_BYTES, Announcement, RolloutBatch, RolloutRecord
from protocol.signing import envelope_from_bytes, envelope_to_bytes, sign
from rewards.registry import make_task

log = logging.getLogger(__name__)

__all__ = ["ATTACKS", "DEFAULT_ATTACKS", "ADMITTED_BY_DESIGN", "run_adversary", "index_entries"]

DEFAULT_ATTACKS = ("garbage", "bad_signature", "forged_reward", "forged_truth", "text_mismatch",
                   "impersonation", "replay")
RAW_ATTACKS = ("displace", "far_expiry")  # a raw hivemind client
SYBIL_ATTACKS = ("far_expiry", "flood", "honest_address", "oversized")  # many keys, one DHT node
ATTACKS = DEFAULT_ATTACKS + (
    "logprob_1e300", "logprob_1e4", "special_tokens", "future_created_at", "foreign_logprob_gap",
    "zero_advantage", "displace", "far_expiry", "flood", "honest_address", "oversized")
ADMITTED_BY_DESIGN = ("foreign_logprob_gap", "zero_advantage")

FLOOD_IDENTITIES = 200
HONEST_ADDRESS_IDENTITIES = 20
OVERSIZED_SENDERS = 4
OVERSIZED_TASKS = 64  # the most a batch may hold (MAX_GROUPS_PER_BATCH)
OVERSIZED_PER_TASK = 8  # 64 x 8 = 512 records, the most a batch may hold
LEVELS = (0, 1)  # shard levels written: where readers of a swarm of up to ~500 peers read
FAR_AHEAD_S = 3 * 3600.0
WITHIN_HOUR_S = 50 * 60.0
_U64 = struct.Struct(">Q")


def _layout():
    """The transport's index layout: (index_entry, heartbeat_entry, shard_prefix, levels), or
    None for the one-key-per-round layout of docs/protocol.md (a transport without them)."""
    try:
        from node.transport.hivemind.index import MAX_LEVEL, shard_prefix
        from node.transport.hivemind.transport import heartbeat_entry, index_entry as entry
    except ImportError:
        return None
    return entry, heartbeat_entry, shard_prefix, tuple(range(MAX_LEVEL + 1))


def index_entries(swarm: str, round: int, peer_id: str, p2p: str, size: int, sha256: str,
                  levels: tuple[int, ...] | None = None) -> list[tuple[str, str, object]]:
    """(key, subkey, value) of ``peer_id``'s index entry for ``round``, as the transport writes
    it: one per shard level in ``levels`` (default ``LEVELS``: where readers of a swarm of this
    size read), or the one key of the unsharded layout."""
    lay = _layout()
    if lay is None:
        return [(f"swarm-node/{swarm}/rollouts/{round}", peer_id, {"p2p": p2p, "size": int(size), "sha256": sha256})]
    entry, _, prefix, all_levels = lay
    return [entry(swarm, round, peer_id, p2p, int(size), sha256, prefix=prefix(peer_id, lv))
            for lv in (LEVELS if levels is None else levels) if lv in all_levels]


def heartbeat_entries(swarm: str, peer_id: str, data: bytes,
                      levels: tuple[int, ...] | None = None) -> list[tuple[str, str, object]]:
    """(key, subkey, value) of ``peer_id``'s heartbeat, at each shard level (or the one key)."""
    lay = _layout()
    if lay is None:
        return [(f"swarm-node/{swarm}/peers", peer_id, bytes(data))]
    _, hb, prefix, all_levels = lay
    return [hb(swarm, peer_id, bytes(data), prefix=prefix(peer_id, lv))
            for lv in (LEVELS if levels is None else levels) if lv in all_levels]


def _handler_name(swarm: str) -> str:
    return f"/swarm-node/{swarm}/rollouts"


def _random_p2p_id() -> str:
    """The libp2p id of an Ed25519 key nobody holds: a publisher that does not exist."""
    from hivemind.p2p import PeerID

    return PeerID(b"\x00\x24\x08\x01\x12\x20" + os.urandom(32)).to_base58()


class RawClient:
    """A plain ``hivemind.DHTNode`` in client mode, with no record validator: what anyone can run
    against the swarm without this project's code. It never stores on itself (``exclude_self``),
    and reads every write back: hivemind's store result is only the last replica's answer, while
    a read for the latest value meets every replica that kept one."""

    def __init__(self, initial_peers: list[str], host_maddrs: list[str], use_relay: bool, nat: bool):
        self.initial_peers, self.host_maddrs, self.use_relay, self.nat = initial_peers, host_maddrs, use_relay, nat
        self.node = None

    async def start(self) -> None:
        from hivemind.dht.node import DHTNode

        self.node = await DHTNode.create(initial_peers=self.initial_peers, host_maddrs=self.host_maddrs,
                                         client_mode=True, use_relay=self.use_relay, nat_port_map=self.nat,
                                         auto_nat=self.nat)

    @property
    def p2p_id(self) -> str:
        return self.node.peer_id.to_base58()

    async def put(self, entries: list[tuple[str, object, object, float]]) -> list[bool]:
        """Store (key, subkey or None, value, expiration) records; for each, whether any replica
        returns it afterwards (kept)."""
        if not entries:
            return []
        keys, subkeys, values, exps = map(list, zip(*entries))
        await self.node.store_many(keys, values, exps, subkeys=subkeys, exclude_self=True)
        return await self.kept(entries)

    async def kept(self, entries: list[tuple[str, object, object, float]], signed: bool = False) -> list[bool]:
        """For each record, whether a replica returns it: the same value (or, for ``signed``
        records, which travel wrapped, an entry of that subkey with that expiration)."""
        keys = list(dict.fromkeys(e[0] for e in entries))
        found = await self.node.get_many(keys, sufficient_expiration_time=float("inf"))
        out = []
        for key, subkey, value, exp in entries:
            got = found.get(key)
            if got is None:
                out.append(False)
            elif subkey is None:
                out.append(got.value == value)
            else:
                entry = got.value.get(subkey) if isinstance(got.value, dict) else None
                out.append(entry is not None and (abs(entry.expiration_time - exp) < 1e-3 if signed
                                                  else getattr(entry, "value", None) == value))
        return out

    async def close(self) -> None:
        if self.node is not None:
            try:
                await asyncio.wait_for(self.node.shutdown(), 10)
            except (asyncio.TimeoutError, ConnectionError, OSError):
                pass
            self.node = None


class SybilNode:
    """One DHT node (and p2p daemon) that writes owner-signed index entries for many keys and
    serves their bodies: the real bytes for ``outbox`` entries, bytes that fail the sha256 for
    ``junk`` ones. Its validator signs a record when its subkey is one of its keys (one
    ``OwnerSignatureValidator`` per key) and otherwise checks records as an honest node does."""

    def __init__(self, swarm: str, round_seconds: float, max_round_lag: int, dht_kwargs: dict):
        self.swarm = swarm
        self.round_seconds, self.max_round_lag = round_seconds, max_round_lag
        self.dht_kwargs = dht_kwargs
        self.node = None
        self.signer = None
        self.outbox: dict[tuple[int, str], bytes] = {}  # (round, peer id) -> envelope
        self.junk: dict[tuple[int, str], int] = {}  # (round, peer id) -> bytes to answer with
        self.served = 0

    async def start(self) -> None:
        from hivemind.dht.validation import CompositeValidator

        from node.transport.hivemind.records import CLOCK_SLACK_S, MAX_RECORD_TTL_S, OwnerSignatureValidator
        from node.transport.hivemind.transport import SwarmRecordValidator, start_dht_node

        class _ManyKeys(OwnerSignatureValidator):
            """Signs for each of several keys: a record whose subkey is one of their peer ids."""

            def __init__(self):
                super().__init__(None, only_peer_records=True, max_ttl_s=MAX_RECORD_TTL_S + CLOCK_SLACK_S)
                self.by_id: dict[str, OwnerSignatureValidator] = {}

            def add(self, ident: Identity) -> None:
                self.by_id[ident.peer_id] = OwnerSignatureValidator(signer=ident)

            def forget(self, peer_id: str) -> None:
                self.by_id.pop(peer_id, None)

            def sign_value(self, record):
                from hivemind.dht.protocol import DHTProtocol

                try:
                    subkey = DHTProtocol.serializer.loads(record.subkey)
                except Exception:  # noqa: BLE001
                    return record.value
                v = self.by_id.get(subkey) if isinstance(subkey, str) else None
                return v.sign_value(record) if v is not None else record.value

        self.signer = _ManyKeys()
        try:
            schema = SwarmRecordValidator(self.swarm, self.round_seconds)
        except TypeError:  # the unsharded transport's validator also takes the staleness window
            schema = SwarmRecordValidator(self.swarm, self.round_seconds, self.max_round_lag)
        # As an honest replica checks records (it is one): only owner-signed entries, in shape.
        self.node = await start_dht_node(record_validator=CompositeValidator([self.signer, schema]), retries=2,
                                         **self.dht_kwargs)
        await self.node.p2p.add_binary_stream_handler(_handler_name(self.swarm), self._serve)

    @property
    def p2p_id(self) -> str:
        return self.node.p2p.peer_id.to_base58()

    def add(self, ident: Identity) -> None:
        self.signer.add(ident)

    async def _serve(self, info, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            (r,) = _U64.unpack(await asyncio.wait_for(reader.readexactly(_U64.size), 10))
            (n,) = await asyncio.wait_for(reader.readexactly(1), 10)
            asked = (await asyncio.wait_for(reader.readexactly(n), 10)).decode("ascii", "replace")
            data = self.outbox.get((r, asked))
            if data is None and (r, asked) in self.junk:
                data = b"\0" * self.junk[(r, asked)]  # the declared size, not the announced sha256
            if data is None:
                return
            writer.write(_U64.pack(len(data)))
            writer.write(data)
            await asyncio.wait_for(writer.drain(), 10)
            self.served += 1
        except (asyncio.TimeoutError, asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()

    def prune(self, oldest: int) -> None:
        for k in [k for k in self.outbox if k[0] < oldest]:
            del self.outbox[k]
        for k in [k for k in self.junk if k[0] < oldest]:
            del self.junk[k]

    async def put(self, entries: list[tuple[str, str, object, float]]) -> tuple[int, int]:
        """Store (key, subkey, value, expiration) entries at once; returns (kept, refused)."""
        if not entries:
            return 0, 0
        keys, subkeys, values, exps = map(list, zip(*entries))
        ok = await self.node.store_many(keys, values, exps, subkeys=subkeys, exclude_self=True)
        kept = sum(bool(ok.get((k, s))) for k, s in zip(keys, subkeys))
        return kept, len(entries) - kept

    async def close(self) -> None:
        if self.node is not None:
            from node.transport.hivemind.transport import stop_dht_node

            await stop_dht_node(self.node)
            self.node = None


class Adversary:
    def __init__(self, cfg: NodeConfig, identity: Identity, transport: Transport, tokenizer,
                 tokenizer_fingerprint: str, model_fingerprint: str, attacks: list[str], out: Path,
                 raw: RawClient | None = None, sybil: SybilNode | None = None):
        self.cfg = cfg
        self.identity = identity
        self.transport = transport
        self.tok = tokenizer
        self.tokenizer_fingerprint = tokenizer_fingerprint
        self.model_fingerprint = model_fingerprint
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
        self._oversized: list[Identity] = []
        self._oversized_records: tuple[RolloutRecord, ...] | None = None
        self._seq = 0
        self._turn = 0  # future_created_at: batch, then heartbeat

    # -- helpers --------------------------------------------------------------------------------
    def _seq_next(self) -> int:
        self._seq = max(self._seq + 1, time.time_ns() // 1000)
        return self._seq

    def _ids(self, text: str, eos: bool = True) -> tuple[int, ...]:
        ids = tuple(self.tok(text, add_special_tokens=False)["input_ids"])
        return ids + ((int(self.tok.eos_token_id),) if eos else ())

    def _record(self, task_id: str, ids: tuple[int, ...], lp: float, text: str | None = None) -> RolloutRecord:
        text = self.tok.decode(list(ids), skip_special_tokens=True) if text is None else text
        return RolloutRecord(task_id, ids, text, tuple(lp for _ in ids), False)

    def _batch(self, r: int, text: str, sender: str | None = None, lp: float = -1.0,
               created_at: float | None = None) -> RolloutBatch:
        task = make_task(f"arithmetic:{r % 1000}:1")
        rec = self._record(str(task.id), self._ids(text), lp)
        return self._batch_of(r, (rec, rec), sender=sender, created_at=created_at)

    def _batch_of(self, r: int, records, sender: str | None = None, fingerprint: str | None = None,
                  created_at: float | None = None) -> RolloutBatch:
        return RolloutBatch(sender=sender or self.identity.peer_id, round=r, policy_version=0,
                            model_fingerprint=self.model_fingerprint,
                            tokenizer_fingerprint=fingerprint or self.tokenizer_fingerprint,
                            created_at=time.time() if created_at is None else created_at,
                            rollouts=tuple(records))

    def _seal(self, payload: bytes, ident: Identity | None = None) -> bytes:
        return envelope_to_bytes(sign(payload, ident or self.identity, self._seq_next()))

    def _with_field(self, batch: RolloutBatch, name: str, value) -> bytes:
        obj = msgpack.unpackb(encode(batch), raw=False)
        for rec in obj["body"]["rollouts"]:
            rec[name] = value
        return msgpack.packb(obj, use_bin_type=True)

    def _count_store(self, kind: str, kept: int, refused: int) -> None:
        s = self.stores.setdefault(kind, {"kept": 0, "refused": 0})
        s["kept"] += kept
        s["refused"] += refused

    def _published_groups(self, r: int, n: int) -> None:
        self.groups_by_round[r] = self.groups_by_round.get(r, 0) + n

    @property
    def _entry_ttl(self) -> float:
        return (self.cfg.swarm.max_round_lag + 2) * self.clock.round_seconds

    # -- the attacks ----------------------------------------------------------------------------
    async def attack(self, kind: str, r: int) -> bool:
        """Publish one hostile message of ``kind`` for round ``r``; False if it had nothing to send."""
        answer = make_task(f"arithmetic:{r % 1000}:1").answer
        expires = 3 * self.clock.round_seconds
        if kind == "garbage":
            data = os.urandom(512)
        elif kind == "bad_signature":
            data = bytearray(self._seal(encode(self._batch(r, "<answer>0</answer>"))))
            data[-7] ^= 0xFF
            data = bytes(data)
        elif kind == "forged_reward":
            data = self._seal(self._with_field(self._batch(r, "<answer>0</answer>"), "reward", 1.0))
        elif kind == "forged_truth":
            data = self._seal(self._with_field(self._batch(r, "<answer>0</answer>"), "ground_truth", "0"))
        elif kind == "text_mismatch":
            b = self._batch(r, "<answer>0</answer>")
            lie = tuple(RolloutRecord(x.task_id, x.completion_ids, f"<answer>{answer}</answer>",
                                      x.behaviour_logprobs, x.truncated) for x in b.rollouts)
            data = self._seal(encode(RolloutBatch(**{**b.__dict__, "rollouts": lie})))
        elif kind == "impersonation":
            victim = next(iter(self.victims), None)
            if victim is None:
                return False
            data = self._seal(encode(self._batch(r, "<answer>0</answer>", sender=victim)))
        elif kind == "replay":
            return await self._replay(r, expires)
        elif kind == "logprob_1e300":
            data = self._seal(encode(self._batch(r, f"<answer>{answer}</answer>", lp=-1e300)))
        elif kind == "logprob_1e4":
            data = self._seal(encode(self._batch(r, f"<answer>{answer}</answer>", lp=-1e4)))
        elif kind == "special_tokens":
            pad = self.tok.pad_token_id if self.tok.pad_token_id is not None else self.tok.eos_token_id
            ids = self._ids("<answer>", eos=False) + (int(pad),) + self._ids(f"{answer}</answer>")
            rec = self._record(f"arithmetic:{r % 1000}:1", ids, -1.0)
            data = self._seal(encode(self._batch_of(r, (rec, rec))))
        elif kind == "future_created_at":
            self._turn += 1
            if self._turn % 2 == 0:  # a heartbeat "alive for an hour"
                hb = Announcement(sender=self.identity.peer_id, round=r, policy_version=0,
                                  model_fingerprint=self.model_fingerprint,
                                  tokenizer_fingerprint=self.tokenizer_fingerprint,
                                  created_at=time.time() + 3600, addrs=())
                await self.transport.announce(self._seal(encode(hb)), 3 * self.clock.round_seconds)
                return True
            data = self._seal(encode(self._batch(r, f"<answer>{answer}</answer>", created_at=time.time() + 3600)))
        elif kind == "foreign_logprob_gap":
            data = self._seal(encode(self._foreign_gap(r)))
            self._published_groups(r, 4)
        elif kind == "zero_advantage":
            data = self._seal(encode(self._zero_advantage(r)))
            self._published_groups(r, 4)
        elif kind == "displace":
            return await self._displace(r)
        elif kind == "far_expiry":
            return await self._far_expiry(r)
        elif kind == "flood":
            return await self._flood(r)
        elif kind == "honest_address":
            return await self._honest_address(r)
        elif kind == "oversized":
            return await self._oversize(r)
        else:
            raise ValueError(f"unknown attack {kind!r}; choose from {ATTACKS}")
        await self.transport.publish(r, data, expires)
        return True

    def _tasks(self, r: int, n: int) -> list[str]:
        return [f"arithmetic:{(r * 16 + k) % 10**9}:1" for k in range(n)]

    def _foreign_gap(self, r: int) -> RolloutBatch:
        """Right and wrong answers (advantages ≠ 0) under another tokenizer's fingerprint; every
        token claimed at log-prob -100 (the admission bound), so the claimed Σ log μ is far
        below what the receiver's policy gives the re-tokenized text: w = π/μ would be e^hundreds."""
        g = self.cfg.generation.num_generations
        records = []
        for tid in self._tasks(r, 4):
            ans = make_task(tid).answer
            for k in range(g):
                text = f"<answer>{ans if k % 2 == 0 else ans + '1'}</answer>"
                records.append(RolloutRecord(tid, self._ids(text), text, tuple(-100.0 for _ in self._ids(text)), False))
        return self._batch_of(r, records, fingerprint="foreign-" + hashlib.sha256(b"other").hexdigest()[:48])

    def _zero_advantage(self, r: int) -> RolloutBatch:
        """G identical completions per task (one reward, advantage 0), every token claimed
        certain (log μ = 0): w = π(y) ≪ 1, which would drag ρ if these rows counted."""
        g = self.cfg.generation.num_generations
        records = []
        for tid in self._tasks(r, 4):
            rec = self._record(tid, self._ids(f"<answer>{make_task(tid).answer}</answer>"), 0.0)
            records += [rec] * g
        return self._batch_of(r, records)

    async def _replay(self, r: int, expires: float) -> bool:
        """Re-publish a peer's old envelope under that peer's subkey for the previous round.

        The in-memory transport lets anyone write any subkey, so there the envelope reaches the
        receivers and the replay check must catch it (it is authentic: only replay detection
        can). Over hivemind, index entries are owner-signed and the write is refused before it
        reaches anyone (counted in ``refused``)."""
        # The newest envelope older than r - 1: old enough to be a replay, fresh enough to pass the
        # clock check (which comes first) so that it is caught as what it is.
        old = [(rr, p, d) for p, by_round in self.victims.items() for rr, d in by_round.items() if rr < r - 1]
        if not old:
            return False
        _, peer, data = max(old)
        outlive = (self.cfg.swarm.max_round_lag + 3) * self.clock.round_seconds
        try:
            await self.transport.publish_as(peer, r - 1, data, outlive)
        except PermissionError as e:  # the hivemind index is owner-signed: this write is refused
            self.refused["replay"] += 1
            log.info("replay refused by the transport: %s", e)
            return False
        return True

    def _owners(self) -> list[str]:
        return sorted(set(self.victims) | set(self.honest_p2p))

    async def _displace(self, r: int) -> bool:
        """Raw client: under each honest peer's own subkey, at every shard level, an entry for
        this round and the next and a heartbeat, all expiring 30 min ahead (later than the
        owner's); then read back: no replica may return them."""
        victims = self._owners()
        if not victims:
            return False
        swarm, junk = self.cfg.swarm.name, b"not the victim's body"
        later = time.time() + 1800
        records = []
        for victim in victims:
            for rr in (r, r + 1):
                for key, subkey, value in index_entries(swarm, rr, victim, self.raw.p2p_id, len(junk),
                                                        hashlib.sha256(junk).hexdigest()):
                    records.append((key, subkey, value, later))
            for key, subkey, value in heartbeat_entries(swarm, victim, b"dead"):
                records.append((key, subkey, value, later))
        kept = await self.raw.put(records)
        self._count_store("displace", sum(kept), len(kept) - sum(kept))
        return True

    async def _far_expiry(self, r: int) -> bool:
        """Raw client: plain values (no subkey: they would replace every entry of the key) under
        the next rounds' keys, where the honest peers' entries go, and under the heartbeat keys,
        and an unsigned entry of a fresh peer id, all expiring 3 h ahead. A fresh key: signed
        entries for the next round expiring 50 min and 3 h ahead."""
        swarm = self.cfg.swarm.name
        far = time.time() + FAR_AHEAD_S
        owners = self._owners() or [self.identity.peer_id]
        plain = "junk planted far ahead"
        round_keys = {k for rr in range(r + 1, r + 4) for p in owners
                      for k, _, _ in index_entries(swarm, rr, p, "x", 1, "0" * 64)}
        hb_keys = {k for p in owners for k, _, _ in heartbeat_entries(swarm, p, b"")}
        fresh = Identity.generate().peer_id
        unsigned = index_entries(swarm, r + 1, fresh, self.raw.p2p_id, 9, "0" * 64)
        groups = {"raw_plain": [(k, None, plain, far) for k in sorted(round_keys)],
                  "raw_plain_heartbeat": [(k, None, plain, far) for k in sorted(hb_keys)],
                  "raw_unsigned_entry": [(k, sk, v, far) for k, sk, v in unsigned]}
        for name, records in groups.items():
            kept = await self.raw.put(records)
            self._count_store(f"far_expiry:{name}", sum(kept), len(kept) - sum(kept))
        for name, ahead in (("signed_50min", WITHIN_HOUR_S), ("signed_3h", FAR_AHEAD_S)):
            ident = Identity.generate()
            self.sybil.add(ident)
            entries = [(k, sk, v, time.time() + ahead)
                       for k, sk, v in index_entries(swarm, r + 1, ident.peer_id, self.sybil.p2p_id, 9, "0" * 64)]
            await self.sybil.put(entries)
            kept = await self.raw.kept(entries, signed=True)  # the raw client sees every replica's
            self._count_store(f"far_expiry:{name}", sum(kept), len(kept) - sum(kept))
            self.sybil.signer.forget(ident.peer_id)
        return True

    async def _signed_junk(self, kind: str, r: int, n: int, p2p_of) -> None:
        """``n`` fresh keys, each an owner-signed index entry for round ``r`` at every shard level;
        ``p2p_of(k, peer_id)`` says where entry k points."""
        entries, fresh = [], []
        exp = time.time() + self._entry_ttl
        for k in range(n):
            ident = Identity.generate()
            self.sybil.add(ident)
            fresh.append(ident.peer_id)
            p2p, size = p2p_of(k, ident.peer_id)
            sha = hashlib.sha256(os.urandom(8)).hexdigest()
            entries += [(key, sk, v, exp) for key, sk, v in index_entries(self.cfg.swarm.name, r, ident.peer_id,
                                                                          p2p, size, sha)]
        kept, refused = await self.sybil.put(entries)
        for pid in fresh:  # signed once: the keys are not needed again
            self.sybil.signer.forget(pid)
        self.flood_keys += len(fresh)
        self._count_store(kind, kept, refused)

    async def _flood(self, r: int) -> bool:
        """FLOOD_IDENTITIES fresh keys, each an owner-signed entry for round r: half point at
        peers that do not exist, half at us, answering with bytes that fail the sha256."""
        def where(k: int, peer_id: str) -> tuple[str, int]:
            if k % 2:
                self.sybil.junk[(r, peer_id)] = 4096
                return self.sybil.p2p_id, 4096
            return _random_p2p_id(), 4096

        await self._signed_junk("flood", r, FLOOD_IDENTITIES, where)
        self.sybil.prune(r - self.cfg.swarm.max_round_lag - 2)
        return True

    async def _honest_address(self, r: int) -> bool:
        """Fresh keys whose owner-signed entries point at honest nodes' libp2p addresses."""
        targets = sorted(self.honest_p2p.values())
        if not targets:
            return False
        await self._signed_junk("honest_address", r, HONEST_ADDRESS_IDENTITIES,
                                lambda k, _: (targets[k % len(targets)], 2048))
        return True

    def _oversized_batch_records(self) -> tuple[RolloutRecord, ...]:
        """512 valid records (64 tasks x 8) with as many tokens each as keep the encoded batch
        under MAX_MESSAGE_BYTES: ids in this vocabulary, no special token, text their decoding."""
        if self._oversized_records is not None:
            return self._oversized_records
        special = set(self.tok.all_special_ids)
        vocab = [t for t in range(len(self.tok)) if t not in special]
        base = self._ids("<answer>0</answer>", eos=False)
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
                    ids = tuple(ids) + (int(self.tok.eos_token_id),)
                    text = self.tok.decode(list(ids), skip_special_tokens=True)
                    while len(text) > 8192:  # the per-record text limit
                        ids = ids[:-2] + ids[-1:]
                        text = self.tok.decode(list(ids), skip_special_tokens=True)
                    recs.append(RolloutRecord(tid, ids, text, tuple(-1.0 for _ in ids), False))
            return tuple(recs)

        def fits(recs) -> bool:
            try:
                return len(encode(self._batch_of(0, recs))) <= MAX_MESSAGE_BYTES - 4096
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
        self._oversized_records = best
        log.info("oversized batches: %d records of %d tokens, %d bytes", len(best), len(best[0].completion_ids),
                 len(encode(self._batch_of(0, best))))
        return best

    async def _oversize(self, r: int) -> bool:
        """OVERSIZED_SENDERS keys, each a batch just under the message limit, served by us."""
        if not self._oversized:
            self._oversized = [Identity.generate() for _ in range(OVERSIZED_SENDERS)]
            for ident in self._oversized:
                self.sybil.add(ident)
                self.identities.append(ident.peer_id)
        records = await asyncio.to_thread(self._oversized_batch_records)
        entries = []
        exp = time.time() + self._entry_ttl
        for ident in self._oversized:
            data = await asyncio.to_thread(
                lambda i=ident: self._seal(encode(self._batch_of(r, records, sender=i.peer_id)), i))
            self.sybil.outbox[(r, ident.peer_id)] = data
            entries += [(k, sk, v, exp) for k, sk, v in index_entries(
                self.cfg.swarm.name, r, ident.peer_id, self.sybil.p2p_id, len(data), hashlib.sha256(data).hexdigest())]
        kept, refused = await self.sybil.put(entries)
        self._count_store("oversized", kept, refused)
        self._published_groups(r, OVERSIZED_TASKS * len(self._oversized))
        self.sybil.prune(r - self.cfg.swarm.max_round_lag - 2)
        return True

    # -- what it learns about the honest peers ---------------------------------------------------
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
                    if "/p2p/" in a:
                        self.honest_p2p[d.publisher] = a.rsplit("/p2p/", 1)[1]
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
                  "victims": sorted(set(self.victims) | set(self.honest_p2p)), "updated_at": time.time()}
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


async def run_adversary(cfg: NodeConfig, attacks: list[str]) -> int:
    from node.run.trainer import identity_path, load_policy

    unknown = [a for a in attacks if a not in ATTACKS]
    if unknown or not attacks:
        raise ConfigError(f"unknown attacks {unknown}; choose from {', '.join(ATTACKS)}")
    sc = cfg.swarm
    needs_dht = [a for a in attacks if a in RAW_ATTACKS + SYBIL_ATTACKS]
    if needs_dht and sc.transport != "hivemind":
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
            await asyncio.to_thread(adv._oversized_batch_records)
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
