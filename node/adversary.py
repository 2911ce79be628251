"""A malicious peer for simulations: it joins a swarm and, every round, publishes hostile messages.

``swarm-node adversary`` (used by ``swarm-node sim`` for a ``[[malicious]]`` fault) joins like a
node, with its own identity, and cycles through the attacks below, one per round. Honest nodes
must reject every one of them, count it under the reason shown, and never train on it; the
simulator's summary checks that nothing the adversary sent was ever used.

    garbage         random bytes instead of an envelope              malformed_envelope
    bad_signature   a well-formed batch whose signature is broken     bad_signature
    forged_reward   a batch whose records carry a "reward" field     unknown_field
    forged_truth    a batch whose records carry a "ground_truth"     unknown_field
    text_mismatch   the right answer as text over other token ids    text_mismatch
    impersonation   a batch signed by the adversary, naming a peer   sender_mismatch
    replay          an honest peer's old envelope again, under that peer's index
                    subkey for the previous round                    replay (memory transport);
                                                                     over hivemind the owner-signed
                                                                     index refuses the write

It trains nothing. Its ``status.json`` counts what it sent, by attack, and what the transport
refused to carry (``refused``).
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import signal
import time
from pathlib import Path

import msgpack

from node.clock import RoundClock
from node.config import NodeConfig
from node.errors import ConfigError
from node.transport import Transport, create_transport
from protocol.codec import encode
from protocol.identity import Identity, load_or_create_identity
from protocol.messages import RolloutBatch, RolloutRecord
from protocol.signing import envelope_from_bytes, envelope_to_bytes, sign
from rewards.registry import make_task

log = logging.getLogger(__name__)

__all__ = ["ATTACKS", "run_adversary"]

ATTACKS = ("garbage", "bad_signature", "forged_reward", "forged_truth", "text_mismatch", "impersonation", "replay")


class Adversary:
    def __init__(self, cfg: NodeConfig, identity: Identity, transport: Transport, tokenizer,
                 tokenizer_fingerprint: str, model_fingerprint: str, attacks: list[str], out: Path):
        self.cfg = cfg
        self.identity = identity
        self.transport = transport
        self.tok = tokenizer
        self.tokenizer_fingerprint = tokenizer_fingerprint
        self.model_fingerprint = model_fingerprint
        self.attacks = attacks
        self.out = out
        self.clock = RoundClock(cfg.swarm.round_seconds)
        self.sent: dict[str, int] = {a: 0 for a in attacks}
        self.refused: dict[str, int] = {a: 0 for a in attacks}  # attacks the transport would not carry
        self.victims: dict[str, dict[int, bytes]] = {}  # peer -> {round: envelope}, recent rounds only
        self._seq = 0

    def _seq_next(self) -> int:
        self._seq = max(self._seq + 1, time.time_ns() // 1000)
        return self._seq

    def _batch(self, r: int, text: str, sender: str | None = None) -> RolloutBatch:
        task = make_task(f"arithmetic:{r % 1000}:1")
        ids = tuple(self.tok(text, add_special_tokens=False)["input_ids"]) + (int(self.tok.eos_token_id),)
        rec = RolloutRecord(str(task.id), ids, self.tok.decode(list(ids), skip_special_tokens=True),
                            tuple(-1.0 for _ in ids), False)
        return RolloutBatch(sender=sender or self.identity.peer_id, round=r, policy_version=0,
                            model_fingerprint=self.model_fingerprint,
                            tokenizer_fingerprint=self.tokenizer_fingerprint, created_at=time.time(),
                            rollouts=(rec, rec))

    def _seal(self, payload: bytes) -> bytes:
        return envelope_to_bytes(sign(payload, self.identity, self._seq_next()))

    def _with_field(self, batch: RolloutBatch, name: str, value) -> bytes:
        obj = msgpack.unpackb(encode(batch), raw=False)
        for rec in obj["body"]["rollouts"]:
            rec[name] = value
        return msgpack.packb(obj, use_bin_type=True)

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
        else:
            raise ValueError(f"unknown attack {kind!r}; choose from {ATTACKS}")
        await self.transport.publish(r, data, expires)
        return True

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

    async def learn_victims(self) -> None:
        """Keep the last few rounds' envelopes of each honest peer (for impersonation and replay)."""
        r = self.clock.current()
        for d in await self.transport.poll(range(max(0, r - 2), r + 1)):
            env = envelope_from_bytes(d.data)
            if env is not None and env.sender == d.publisher:
                self.victims.setdefault(d.publisher, {})[d.round] = d.data
        for by_round in self.victims.values():
            for old in [rr for rr in by_round if rr < r - 4]:
                del by_round[old]

    def write_status(self) -> None:
        status = {"adversary": True, "peer_id": self.identity.peer_id, "sent": self.sent, "refused": self.refused,
                  "victims": sorted(self.victims), "updated_at": time.time()}
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
                await self.learn_victims()
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
    from node.trainer import identity_path, load_policy

    unknown = [a for a in attacks if a not in ATTACKS]
    if unknown or not attacks:
        raise ConfigError(f"unknown attacks {unknown}; choose from {', '.join(ATTACKS)}")
    out = Path(cfg.run.dir)
    out.mkdir(parents=True, exist_ok=True)
    policy = await asyncio.to_thread(load_policy, cfg)  # only its tokenizer and fingerprints are used
    ident = load_or_create_identity(identity_path(cfg))
    sc = cfg.swarm
    kwargs = {}
    if sc.transport == "hivemind":
        kwargs = dict(initial_peers=sc.initial_peers, host_maddrs=sc.host_maddrs,
                      startup_timeout=sc.startup_timeout, join_retries=sc.join_retries,
                      join_backoff=sc.join_backoff, use_relay=sc.use_relay, nat_port_map=sc.nat_port_map,
                      round_seconds=sc.round_seconds, signer=ident)
    transport = create_transport(sc.transport, swarm=sc.name, publisher=ident.peer_id, **kwargs)
    await transport.start()
    adv = Adversary(cfg, ident, transport, policy.tokenizer, policy.tokenizer_fingerprint,
                    policy.model_fingerprint, attacks, out)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    log.info("adversary %s joined swarm %r; attacks: %s", ident.peer_id, sc.name, ", ".join(attacks))
    try:
        await adv.run(stop)
    finally:
        adv.write_status()
        await transport.close()
    return 0

