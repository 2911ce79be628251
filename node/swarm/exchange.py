"""Swarm sampling (SAPO): publish this node's rollouts each round, admit peers' rollouts, and hand
the learner J peer groups per training step.

``SwarmExchange`` sits between the trainer and a ``Transport``. Outgoing, it wraps a round's
rollouts in a ``RolloutBatch``, signs it (``protocol.signing``) and publishes it under
``(swarm, round, peer id)``. Incoming, a background task polls the transport for the rounds still
inside the staleness window and runs every envelope through the admission checks below; what
passes is kept in a pool of *groups* (one peer, one round, one task: the unit GRPO needs for a
baseline). ``take`` hands out up to J groups, freshest first and spread across peers.

Admission, in order; each rejection is counted under the reason shown (``stats.rejected``)::

    envelope framing unreadable                   malformed_envelope
    publisher key ≠ signer                        sender_mismatch
    signature / key / peer id / clock / replay    bad_signature, sender_mismatch, stale_clock, replay
    payload: size, msgpack, schema, version       oversized, malformed, unknown_field, unsupported_version
    not a rollout batch                           wrong_kind
    header sender ≠ signer                        sender_mismatch
    header round ≠ published round / future       wrong_round
    a second batch from this sender this round    duplicate_round
    more than MAX_GROUPS_PER_BATCH tasks          too_many_groups
    task id names no task                         bad_task
    token ids outside this vocabulary, empty      bad_tokens
    a special token but a final EOS (same tok.)   special_tokens
    a token log-prob below MIN_TOKEN_LOGPROB      implausible_logprob
    text ≠ decode(token ids) (same tokenizer)     text_mismatch
    created_at ≠ signed envelope time (± 5 s)     created_at_mismatch   (any message)

The envelope is remembered for replay detection only once every check has passed, so a copy of an
honest envelope that fails a later check (re-published under another round) cannot get the
honest delivery refused as a replay. Memory is bounded whatever peers send: one batch per sender
and round, at most ``MAX_GROUPS_PER_BATCH`` groups per batch and ``group_cap`` completions per
group, at most ``MAX_SENDER_BYTES`` pooled per sender (its own oldest evicted first) and
``MAX_POOL_GROUPS`` groups / ``MAX_POOL_BYTES`` in all (the largest holder's oldest first), per-peer counters
and heartbeats for at most ``MAX_TRACKED_PEERS`` peers. A message's ``created_at`` must agree
with its signed envelope time (``created_at_mismatch``), so expiry by it is not the sender's
choice. CPU is bounded too: only what could be used is checked (a group's first ``group_cap``
records no longer than the node trains on, ``max_tokens``; nothing of a batch already too old
for the window, or a second one from a sender and round), and the checks run in a worker thread
(``admit_off_loop``), so a 4 MiB batch does not stall heartbeats, the trainer or the status
display.

Transports add their own before any of this: ``oversized`` (a body declared or framed larger
than all this node could use, ``usable_envelope_bytes``, or than the message limit: not
fetched, or refused before it is read) and ``hash_mismatch`` (a body that is not what its index
record announced).

Nothing a peer claims about quality is used: the protocol has no reward or ground-truth fields
(a message carrying one fails as ``unknown_field``) and the trainer re-scores every admitted
completion from the task id. Groups older than ``max_round_lag`` rounds are dropped and counted
(``stats.dropped_stale``), not rejected: they were honest, only late.
"""

from __future__ import annotations

import asyncio
import collections
import logging
import math
import random
import sys
import time
from dataclasses import dataclass, field
from typing import Callable, Sequence

from node.clock import RoundClock
from node.swarm.link import SwarmLink
from node.transport.base import Delivery, Transport
from node.transport.hivemind.index import envelopes_wanted
from protocol.codec import decode, encode
from protocol.errors import MessageTooLarge, ProtocolError, UnknownField, UnsupportedVersion
from protocol.identity import Identity
from protocol.messages import MAX_ROLLOUTS, MAX_TASK_ID_CHARS, MIN_TOKEN_LOGPROB, Announcement, RolloutBatch, RolloutRecord
from protocol.signing import MAX_ENVELOPE_SIZE, Envelope, Verifier, VerifyResult, envelope_from_bytes, envelope_to_bytes, sign
from rewards.errors import TaskError
from rewards.registry import make_task

log = logging.getLogger(__name__)

__all__ = ["PeerGroup", "SwarmStats", "SwarmExchange", "REJECT_REASONS", "allowed_specials", "usable_envelope_bytes"]

MAX_GROUPS_PER_BATCH = 64  # tasks in one peer batch (an honest node publishes prompts_per_step - J)
MAX_POOL_GROUPS = 4096  # admitted, unused groups kept at once
MAX_POOL_BYTES = 256 << 20  # ... and their size (ids, log-probs, text: group_bytes), whoever sent them
MAX_SENDER_BYTES = 32 << 20  # one sender's share: about two full 4 MiB envelopes once decoded
# A completion's text bytes per token, from above (the longest tokens of common vocabularies are
# runs of spaces or repeated punctuation, 16-32 bytes): bounds text whose tokens this node cannot count.
MAX_TEXT_BYTES_PER_TOKEN = 32
MAX_CREATED_DRIFT_S = 5.0  # a message's created_at vs its signed (clock-checked) envelope time
MAX_TRACKED_PEERS = 1024  # per-peer counters kept; the rest are summed under "(other)"
OTHER_PEERS = "(other)"

REJECT_REASONS = (
    "malformed_envelope", "bad_signature", "sender_mismatch", "stale_clock", "replay", "oversized",
    "malformed", "unknown_field", "unsupported_version", "wrong_kind", "wrong_round", "bad_task",
    "bad_tokens", "special_tokens", "implausible_logprob", "text_mismatch", "duplicate_round",
    "too_many_groups", "created_at_mismatch", "hash_mismatch",  # counted by a transport: the body does not match its index record
)

# Refusals that are the sender's own doing whatever its clock or restarts: the carrier backs it
# off (replay, duplicate_round and stale_clock can happen to an honest node that restarted or
# whose clock drifts, so they are only counted).
SENDER_FAULTS = frozenset(REJECT_REASONS) - {"replay", "duplicate_round", "stale_clock", "oversized", "hash_mismatch"}

_VERIFY_REASON = {
    VerifyResult.MALFORMED: "malformed_envelope",
    VerifyResult.BAD_SIGNATURE: "bad_signature",
    VerifyResult.SENDER_MISMATCH: "sender_mismatch",
    VerifyResult.REPLAY: "replay",
    VerifyResult.STALE_CLOCK: "stale_clock",
}


def _decode_reason(e: ProtocolError) -> str:
    if isinstance(e, MessageTooLarge):
        return "oversized"
    if isinstance(e, UnsupportedVersion):
        return "unsupported_version"
    if isinstance(e, UnknownField):
        return "unknown_field"
    return "malformed"


@dataclass(frozen=True)
class PeerGroup:
    """A peer's completions of one task in one round: one GRPO group for this node's learner."""

    sender: str
    round: int
    policy_version: int
    model_fingerprint: str
    tokenizer_fingerprint: str
    task_id: str
    records: tuple[RolloutRecord, ...]

    @property
    def key(self) -> str:
        return f"{self.sender}/{self.round}/{self.task_id}"


@dataclass
class SwarmStats:
    """Counters since start; the trainer copies them into metrics and the status display."""

    rejected: collections.Counter = field(default_factory=collections.Counter)
    envelopes_in: int = 0  # admitted envelopes
    groups_in: collections.Counter = field(default_factory=collections.Counter)  # by sender
    groups_used: collections.Counter = field(default_factory=collections.Counter)  # by sender
    dropped_stale: int = 0  # admitted groups that aged out of the window before use
    dropped_full: int = 0  # admitted groups evicted because the pool was full
    dropped_long: int = 0  # completions longer than this node trains on: not checked, not kept
    envelopes_out: int = 0
    rollouts_out: int = 0
    publish_errors: int = 0
    heartbeat_errors: int = 0
    poll_errors: int = 0
    publish_skipped: int = 0  # rounds not published while the link was down
    publish_timeouts: int = 0  # publishes abandoned after publish_timeout
    internal_errors: int = 0  # a check itself failed: a bug, logged with its traceback


def group_bytes(g: PeerGroup) -> int:
    """What a pooled group costs in memory, from above: a record's ids and log-probs are tuples of
    Python ints and floats (an 8-byte slot plus a 28- or 24-byte object each), its text a str
    (``sys.getsizeof``: up to 4 bytes a character), plus the record itself."""
    return sum(200 + 68 * len(r.completion_ids) + sys.getsizeof(r.completion_text) for r in g.records)


def usable_envelope_bytes(max_tokens: int | None, records: int = MAX_ROLLOUTS) -> int:
    """The encoded size, from above, of the largest envelope whose every completion this node
    could train on: ``records`` (a batch holds at most MAX_ROLLOUTS) of ``max_tokens`` tokens
    (5 bytes an id, 9 a float64 log-prob, MAX_TEXT_BYTES_PER_TOKEN of text), each with its task
    id. Not this node's group size: a sender with bigger groups is honest, and the first
    ``group_cap`` of each are usable. A body declared larger must hold completions longer than
    this node trains on, so it is not fetched: what a hostile sender's big batch costs a receiver
    is an index entry, not 4 MiB of decoding. (A sender with another, finer tokenizer may need
    more ids than ``max_tokens`` for a text this node could use: such a batch near the bound is
    refused.) None: no limit but the message size. tests/node/swarm/test_exchange.py checks the bound
    against real encodings."""
    if max_tokens is None:
        return MAX_ENVELOPE_SIZE
    record = 160 + MAX_TASK_ID_CHARS + max_tokens * (5 + 9 + MAX_TEXT_BYTES_PER_TOKEN)
    return min(MAX_ENVELOPE_SIZE, 2048 + min(records, MAX_ROLLOUTS) * record)

def allowed_specials(ids: Sequence[int], special_ids: frozenset[int], eos_id: int | None) -> bool:
    """True if ``ids`` holds no special token except, as its last token, EOS. The one rule for
    both sides: a node publishes only completions its peers will admit (node/run/rollouts.py)."""
    if not special_ids:
        return True
    return not any(t in special_ids for t in ids[:-1]) and (ids[-1] not in special_ids or ids[-1] == eos_id)


def _bump(counter: collections.Counter, key: str, n: int = 1) -> None:
    """Count per peer, with bounded memory: peer ids cost an attacker nothing to make."""
    if key in counter or len(counter) < MAX_TRACKED_PEERS:
        counter[key] += n
    else:
        counter[OTHER_PEERS] += n


class _Refused(Exception):
    """An admission check failed: counted under ``reason`` (REJECT_REASONS) by the event loop."""

    def __init__(self, reason: str, detail: str = ""):
        super().__init__(reason)
        self.reason, self.detail = reason, detail


class SwarmExchange:
    def __init__(self, transport: Transport, identity: Identity, clock: RoundClock, *,
                 tokenizer_fingerprint: str, model_fingerprint: str, vocab_size: int,
                 decode_text: Callable[[Sequence[int]], str], group_cap: int = 64,
                 max_round_lag: int = 4, poll_seconds: float = 0.25, max_clock_skew: float = 30.0,
                 seed: int = 0, special_ids: frozenset[int] = frozenset(), eos_id: int | None = None,
                 external_groups: int | None = None, max_sender_share: float = 1.0,
                 max_tokens: int | None = None):
        self.transport = transport
        self.identity = identity
        self.clock = clock
        self.tokenizer_fingerprint = tokenizer_fingerprint
        self.model_fingerprint = model_fingerprint
        self.vocab_size = vocab_size
        self.decode_text = decode_text
        # Special tokens are invisible to the text check (decoding skips them): only a final EOS
        # may be one, so a completion cannot smuggle <pad> or a chat-template token past it.
        self.special_ids = frozenset(special_ids)
        self.eos_id = eos_id
        self.group_cap = group_cap  # completions kept per group: this node's group size
        # Completions longer than this node trains on (its max_completion_length) are dropped at
        # admission, and bodies bigger than all it could use are not fetched (None: no bound).
        self.max_tokens = max_tokens
        self.max_body = usable_envelope_bytes(max_tokens)
        self.max_round_lag = max_round_lag
        self.poll_seconds = poll_seconds
        # J: what the trainer takes a step, hence what is worth fetching a round (None: everything)
        self.external_groups = external_groups
        self.max_sender_share = max_sender_share
        self._groups_per_envelope = 1.0  # running mean over admitted envelopes: sizes the fetch budget
        # An honest envelope may be fetched up to the whole window after it was signed, so the
        # clock check allows the window on top of the configured skew.
        self.verifier = Verifier(max_skew_s=max_clock_skew + (max_round_lag + 1) * clock.round_seconds)
        self.stats = SwarmStats()
        self._pool: dict[str, PeerGroup] = {}  # key -> group, in admission order
        self._bytes: dict[str, int] = {}  # key -> group_bytes of that group
        self._sender_bytes: collections.Counter = collections.Counter()  # sender -> bytes pooled
        self._pool_bytes = 0
        self._batches: set[tuple[str, int]] = set()  # (sender, round) admitted, inside the window
        self._arrived = asyncio.Event()
        self._rng = random.Random(f"swarm-exchange:{seed}:{identity.peer_id}")
        self._seq = 0
        self._task: asyncio.Task | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self.peers: dict[str, Announcement] = {}  # sender -> latest verified heartbeat
        self._last_heartbeat_poll = 0.0
        self.link = SwarmLink(transport)  # up / down / rejoining, and the rejoining itself
        # A publish or heartbeat that takes longer than this is abandoned: a round never waits on it.
        self.publish_timeout = max(1.0, clock.round_seconds / 2)

    @property
    def peer_id(self) -> str:
        return self.identity.peer_id

    # -- lifecycle ------------------------------------------------------------------------------
    async def start(self) -> None:
        self._loop = asyncio.get_running_loop()
        self.transport.set_gate(self.gate)
        await self.transport.start()
        self._task = asyncio.create_task(self._receive_loop(), name="swarm-receive")
        self._task.add_done_callback(self._receive_ended)

    @staticmethod
    def _receive_ended(task: asyncio.Task) -> None:
        if not task.cancelled() and task.exception() is not None:
            log.error("the swarm receive task died: no more peer rollouts will arrive",
                      exc_info=task.exception())

    async def close(self) -> None:
        try:
            if self._task is not None:
                self._task.cancel()
                try:
                    await self._task
                except asyncio.CancelledError:
                    pass
                except Exception:  # noqa: BLE001 - already logged by _receive_ended
                    pass
                self._task = None
        finally:
            await self.transport.close()

    # -- outgoing -------------------------------------------------------------------------------
    def _next_seq(self) -> int:
        # Time-based so a restarted node (same key, fresh process) never reuses a sequence number
        # that peers remember: they would reject its envelopes as replays.
        self._seq = max(self._seq + 1, time.time_ns() // 1000)
        return self._seq

    def _seal(self, msg: RolloutBatch | Announcement) -> bytes:
        return envelope_to_bytes(sign(encode(msg), self.identity, self._next_seq()))

    def make_envelope(self, round: int, policy_version: int, records: Sequence[RolloutRecord]) -> bytes:
        return self._seal(RolloutBatch(
            sender=self.peer_id, round=round, policy_version=policy_version,
            model_fingerprint=self.model_fingerprint, tokenizer_fingerprint=self.tokenizer_fingerprint,
            created_at=time.time(), rollouts=tuple(records)))

    async def publish(self, round: int, policy_version: int, records: Sequence[RolloutRecord]) -> bool:
        """Sign and publish this round's rollouts; a failure is logged and counted, not raised:
        the node keeps training on its own rollouts while the swarm is unreachable."""
        data = self.make_envelope(round, policy_version, records)
        expires_in = (self.max_round_lag + 2) * self.clock.round_seconds
        if not self.link.up:  # rejoining: nothing to publish into; never wait for the link
            self.stats.publish_skipped += 1
            return False
        try:
            await asyncio.wait_for(self.transport.publish(round, data, expires_in), self.publish_timeout)
        except asyncio.TimeoutError:
            self.stats.publish_timeouts += 1
            log.warning("publishing round %d took over %.1f s: abandoned, the round goes on", round,
                        self.publish_timeout)
            return False
        except Exception as e:  # noqa: BLE001 - any transport failure must not stop training
            self.stats.publish_errors += 1
            log.warning("publishing round %d failed (%s: %s); continuing", round, type(e).__name__, e)
            return False
        self.stats.envelopes_out += 1
        self.stats.rollouts_out += len(records)
        return True

    @property
    def heartbeat_ttl(self) -> float:
        return 3 * self.clock.round_seconds

    async def announce(self, round: int, policy_version: int) -> None:
        """Publish a signed heartbeat: alive, at this round and policy version, at these addresses."""
        addrs = tuple(str(a)[:256] for a in self.transport.info().get("maddrs", [])[:16])
        data = self._seal(Announcement(
            sender=self.peer_id, round=round, policy_version=policy_version,
            model_fingerprint=self.model_fingerprint, tokenizer_fingerprint=self.tokenizer_fingerprint,
            created_at=time.time(), addrs=addrs))
        if not self.link.up:
            return
        try:
            await asyncio.wait_for(self.transport.announce(data, self.heartbeat_ttl), self.publish_timeout)
        except Exception as e:  # noqa: BLE001 - a missed heartbeat is harmless (a timeout too)
            self.stats.heartbeat_errors += 1
            log.debug("heartbeat failed: %s: %s", type(e).__name__, e)

    def peers_alive(self) -> int:
        """Peers whose latest verified heartbeat was signed less than ``heartbeat_ttl`` ago."""
        now = time.time()
        for sender in [s for s, a in self.peers.items() if now - a.created_at > self.heartbeat_ttl]:
            del self.peers[sender]
        return len(self.peers)

    # -- incoming -------------------------------------------------------------------------------
    def window(self, current: int | None = None) -> range:
        r = self.clock.current() if current is None else current
        return range(max(0, r - self.max_round_lag), r + 1)

    async def _receive_loop(self) -> None:
        while True:
            await self.poll_once()
            await asyncio.sleep(self.poll_seconds)

    async def poll_once(self) -> int:
        """Fetch and admit new envelopes (and, every half round, heartbeats); returns how many
        groups were admitted. Never raises: the network comes and goes, and a failing check is
        counted and logged rather than ending the receive task."""
        admitted = 0
        self.link.check()
        if not await self.link.maybe_rejoin():
            return 0  # down: the node trains on its own rollouts until the link is back
        try:
            for d in await self.transport.poll(self.window(), self.envelopes_wanted(), self.max_body):
                try:
                    admitted += await self.admit_off_loop(d)
                except asyncio.CancelledError:
                    raise
                except Exception:  # noqa: BLE001 - as _guarded: a bug in a check is counted, not fatal
                    self.stats.internal_errors += 1
                    log.exception("admission check failed on a message from %.48s; message dropped", d.publisher)
            if time.time() - self._last_heartbeat_poll >= self.clock.round_seconds / 2:
                self._last_heartbeat_poll = time.time()
                for d in await self.transport.poll_announcements():
                    self._guarded(self.admit_announcement, d)
            self.link.poll_ok()
        except asyncio.CancelledError:
            raise
        except Exception as e:  # noqa: BLE001
            self.stats.poll_errors += 1
            self.link.poll_failed(e)
        if admitted:
            self._arrived.set()
        return admitted

    def envelopes_wanted(self) -> int | None:
        """Envelopes a round worth fetching: J groups' worth with a margin, from what peers'
        envelopes have held so far (None when J is not known: fetch everything)."""
        if self.external_groups is None:
            return None
        return envelopes_wanted(self.external_groups, self._groups_per_envelope)

    def _guarded(self, check: Callable[[Delivery], int], d: Delivery) -> int:
        try:
            return int(check(d))
        except Exception:  # noqa: BLE001 - a bug in a check must not let the message in or stop us
            self.stats.internal_errors += 1
            log.exception("admission check failed on a message from %.48s; message dropped", d.publisher)
            return 0

    def _reject(self, reason: str, d: Delivery, detail: str = "") -> int:
        self.stats.rejected[reason] += 1
        log.info("rejected envelope from %.48s (round %d): %s%s", d.publisher, d.round, reason,
                 f" ({detail})" if detail else "")
        return 0

    def _open(self, d: Delivery, kind: type) -> tuple[Envelope, RolloutBatch | Announcement]:
        """The checks every message passes: framing, publisher, signature, clock, replay (not yet
        remembered), decoding, kind and header sender. Raises ``_Refused`` when one fails. Pure
        (reads the replay memory, changes nothing), so it may run off the event loop."""
        env = envelope_from_bytes(d.data)
        if env is None:
            raise _Refused("malformed_envelope")
        if env.sender != d.publisher:
            raise _Refused("sender_mismatch", f"published under {d.publisher}, signed by {env.sender}")
        verdict = self.verifier.verify(env, commit=False)
        if verdict is not VerifyResult.ACCEPTED:
            raise _Refused(_VERIFY_REASON[verdict])
        try:
            msg = decode(env.payload)
        except ProtocolError as e:
            raise _Refused(_decode_reason(e), str(e)) from None
        if not isinstance(msg, kind):
            raise _Refused("wrong_kind", type(msg).__name__)
        if msg.sender != env.sender:
            raise _Refused("sender_mismatch", f"header says {msg.sender}")
        # created_at is the sender's claim; the envelope's timestamp is signed and clock-checked
        # by the verifier. Anything that reads created_at (heartbeat expiry) may then trust it.
        if abs(msg.created_at - env.timestamp) > MAX_CREATED_DRIFT_S:
            raise _Refused("created_at_mismatch", f"created_at {msg.created_at:.0f} vs signed {env.timestamp:.0f}")
        return env, msg

    def admit_announcement(self, d: Delivery) -> bool:
        """Verify a heartbeat (same signature, replay and schema rules as rollouts)."""
        try:
            env, msg = self._open(d, Announcement)
        except _Refused as r:
            return bool(self._reject(r.reason, d, r.detail))
        if not self.verifier.commit(env):
            return bool(self._reject("replay", d))
        if msg.sender not in self.peers and len(self.peers) >= MAX_TRACKED_PEERS:
            # Keys are free: a flood of fresh identities must not grow this without bound. The
            # heartbeat heard longest ago makes room (it is the next to expire anyway).
            del self.peers[min(self.peers, key=lambda k: self.peers[k].created_at)]
        self.peers[msg.sender] = msg
        return True

    def gate(self, d: Delivery) -> bool:
        """Every check a message must pass that needs no change of state, for a carrier that
        forwards messages (gossipsub's validator): False stops it here, counted as ``admit``
        would count it (on the loop: this runs in the carrier's worker thread). A message passed
        on still goes through ``admit`` when polled; only that one remembers it."""
        if d.round < 0:
            try:
                self._open(d, Announcement)
                return True
            except _Refused as r:
                checked = r
        else:
            checked = self._check(d)
            if not isinstance(checked, _Refused) or checked.reason == "stale":
                return True  # a stale batch is honest, only late: ``admit`` counts it
        self._loop.call_soon_threadsafe(self._commit, d, checked)
        return False

    def admit(self, d: Delivery) -> int:
        """Run one delivery through every admission check; returns the groups admitted."""
        return self._commit(d, self._check(d))

    async def admit_off_loop(self, d: Delivery) -> int:
        """``admit`` with its expensive part (signature, decoding, every record's checks and text
        decoding: ~0.1 s for a full 4 MiB batch) in a worker thread, so a large batch does not
        stall heartbeats, the trainer or the status display; the pool changes on the loop."""
        checked = await asyncio.to_thread(self._check, d)
        return self._guarded(lambda d: self._commit(d, checked), d)

    def _check(self, d: Delivery) -> tuple[Envelope, RolloutBatch, dict, int] | _Refused:
        """Every check of a rollout batch that needs no change of state; the groups it would add
        (only what the node could use, ``_usable``: the rest is neither checked nor kept) and how
        many completions were too long, or the refusal."""
        try:
            env, msg = self._open(d, RolloutBatch)
            if msg.round != d.round or msg.round > self.clock.current() + 1:
                raise _Refused("wrong_round", f"batch says round {msg.round}")
            if (msg.sender, msg.round) in self._batches:
                raise _Refused("duplicate_round")
            groups: dict[str, list[RolloutRecord]] = {}
            for rec in msg.rollouts:
                groups.setdefault(rec.task_id, []).append(rec)
            if len(groups) > MAX_GROUPS_PER_BATCH:
                raise _Refused("too_many_groups", f"{len(groups)} tasks")
            if msg.round < self.clock.current() - self.max_round_lag:
                raise _Refused("stale", str(len(groups)))  # could never be used: not checked further
            same_tokenizer = msg.tokenizer_fingerprint == self.tokenizer_fingerprint
            groups, dropped_long = self._usable(groups, same_tokenizer)
            for task_id, records in groups.items():  # the whole batch is refused if any record fails
                self._check_group(task_id, records, same_tokenizer)
        except _Refused as r:
            return r
        return env, msg, groups, dropped_long

    def _usable(self, groups: dict[str, list[RolloutRecord]], same_tokenizer: bool
                ) -> tuple[dict[str, list[RolloutRecord]], int]:
        """Each group's first ``group_cap`` completions this node could train on, and how many
        were left out for length: a longer one would be dropped by the learner (node/run/rollouts.py
        external_samples), so it is neither checked nor kept. Another tokenizer's tokens cannot be
        counted here: its text is bounded instead (the learner counts it exactly)."""
        if self.max_tokens is None:
            return {t: recs[:self.group_cap] for t, recs in groups.items()}, 0
        text_limit = self.max_tokens * MAX_TEXT_BYTES_PER_TOKEN
        kept, dropped = {}, 0
        for t, recs in groups.items():
            fits = [r for r in recs if (len(r.completion_ids) <= self.max_tokens if same_tokenizer
                                        else len(r.completion_text.encode()) <= text_limit)]
            dropped += len(recs) - len(fits)
            if fits:
                kept[t] = fits[:self.group_cap]
        return kept, dropped

    def _check_group(self, task_id: str, records: list[RolloutRecord], same_tokenizer: bool) -> None:
        try:
            make_task(task_id)
        except TaskError as e:
            raise _Refused("bad_task", str(e)) from None
        for rec in records:
            if not rec.completion_ids or (same_tokenizer and max(rec.completion_ids) >= self.vocab_size):
                raise _Refused("bad_tokens", f"task {task_id}")
            if same_tokenizer and not allowed_specials(rec.completion_ids, self.special_ids, self.eos_id):
                raise _Refused("special_tokens", f"task {task_id}")
            if min(rec.behaviour_logprobs) < MIN_TOKEN_LOGPROB:
                raise _Refused("implausible_logprob",
                               f"task {task_id}: {min(rec.behaviour_logprobs):g} < {MIN_TOKEN_LOGPROB:g}")
            if same_tokenizer:
                try:
                    text = self.decode_text(rec.completion_ids)
                except Exception:  # noqa: BLE001 - a tokenizer's error on hostile ids
                    raise _Refused("bad_tokens", f"task {task_id}: ids do not decode") from None
                if text != rec.completion_text:
                    raise _Refused("text_mismatch", f"task {task_id}")

    def _commit(self, d: Delivery, checked) -> int:
        """Count a refusal, or remember the envelope and pool its groups (on the event loop)."""
        if isinstance(checked, _Refused):
            if checked.reason == "stale":  # honest, only late: its groups are dropped, not rejected
                self.stats.dropped_stale += int(checked.detail)
                return 0
            if checked.reason in SENDER_FAULTS:
                self.transport.distrust(d.publisher, d.round)
            return self._reject(checked.reason, d, checked.detail)
        env, msg, groups, dropped_long = checked
        if (msg.sender, msg.round) in self._batches:  # admitted while this one was being checked
            return self._reject("duplicate_round", d)
        if not self.verifier.commit(env):
            return self._reject("replay", d)
        self.stats.dropped_long += dropped_long
        self._batches.add((msg.sender, msg.round))
        self.stats.envelopes_in += 1
        if not groups:  # nothing this node can use: it earns no fetch slot, nor sizes the budget
            return 0
        self.transport.vouch(msg.sender)
        # What one envelope can give a step: a sender cannot supply more than its share, so a
        # batch of 64 groups must not shrink the fetch budget (nor one of 1 grow it past J).
        usable = len(groups) if self.external_groups is None else min(
            len(groups), max(1, math.ceil(self.external_groups * self.max_sender_share)))
        self._groups_per_envelope += (usable - self._groups_per_envelope) / min(self.stats.envelopes_in, 20)
        for task_id, records in groups.items():
            g = PeerGroup(msg.sender, msg.round, msg.policy_version, msg.model_fingerprint,
                          msg.tokenizer_fingerprint, task_id, tuple(records))
            self._add(g)
            _bump(self.stats.groups_in, msg.sender)
        self._bound_pool(msg.sender)
        return len(groups)

    # -- the pool -------------------------------------------------------------------------------
    def _add(self, g: PeerGroup) -> None:
        size = group_bytes(g)
        self._pool[g.key] = g
        self._bytes[g.key] = size
        self._sender_bytes[g.sender] += size
        self._pool_bytes += size

    def _drop(self, key: str) -> PeerGroup:
        g = self._pool.pop(key)
        size = self._bytes.pop(key)
        self._pool_bytes -= size
        self._sender_bytes[g.sender] -= size
        if self._sender_bytes[g.sender] <= 0:
            del self._sender_bytes[g.sender]
        return g

    def _bound_pool(self, sender: str) -> None:
        """Memory per sender and in all: a sender over its share loses its own oldest groups
        first, so a flood costs the flooder, not honest peers; then the pool as a whole sheds its
        oldest groups down to its count and byte limits."""
        while self._sender_bytes.get(sender, 0) > MAX_SENDER_BYTES:
            self._drop(next(k for k, g in self._pool.items() if g.sender == sender))
            self.stats.dropped_full += 1
        while len(self._pool) > MAX_POOL_GROUPS or self._pool_bytes > MAX_POOL_BYTES:
            # The largest holder gives way (its oldest group): with oldest-first alone, a flood of
            # fresh keys would push every honest group out.
            biggest = max(self._sender_bytes, key=self._sender_bytes.__getitem__)
            self._drop(next(k for k, g in self._pool.items() if g.sender == biggest))
            self.stats.dropped_full += 1

    # -- sampling -------------------------------------------------------------------------------
    def _prune(self, current: int) -> None:
        oldest = current - self.max_round_lag
        stale = [k for k, g in self._pool.items() if g.round < oldest]
        for k in stale:
            self._drop(k)
        self.stats.dropped_stale += len(stale)
        self._batches = {b for b in self._batches if b[1] >= oldest}

    def available(self, current: int | None = None) -> int:
        r = self.clock.current() if current is None else current
        self._prune(r)
        return len(self._pool)

    async def wait_for(self, n: int, deadline: float) -> int:
        """Wait until ``n`` groups are available or the wall clock reaches ``deadline``;
        returns how many are available then."""
        while self.available() < n and (left := deadline - time.time()) > 0:
            self._arrived.clear()
            try:
                await asyncio.wait_for(self._arrived.wait(), timeout=min(left, self.poll_seconds))
            except asyncio.TimeoutError:
                pass
        return self.available()

    def take(self, n: int, current: int | None = None) -> list[PeerGroup]:
        """Up to ``n`` unused groups: freshest round first, one sender at a time round-robin, and
        at most ``ceil(n x max_sender_share)`` from any one sender (so one fast or flooding key
        cannot fill a step; keys are free, so this is fairness between keys, and the fetch budget
        and the per-source ρ bound what one operator with many can do), random within a sender's
        round."""
        r = self.clock.current() if current is None else current
        self._prune(r)
        by_sender: dict[str, list[PeerGroup]] = collections.defaultdict(list)
        groups = list(self._pool.values())
        self._rng.shuffle(groups)
        for g in sorted(groups, key=lambda g: -g.round):
            by_sender[g.sender].append(g)
        share = max(1, math.ceil(n * self.max_sender_share - 1e-9))
        for s in by_sender:
            del by_sender[s][share:]
        senders = list(by_sender)
        self._rng.shuffle(senders)
        # Senders whose freshest group is newest go first.
        senders.sort(key=lambda s: -by_sender[s][0].round)
        picked: list[PeerGroup] = []
        while len(picked) < n and any(by_sender.values()):
            for s in senders:
                if by_sender[s] and len(picked) < n:
                    picked.append(by_sender[s].pop(0))
        for g in picked:
            self._drop(g.key)
            _bump(self.stats.groups_used, g.sender)
        return picked

    def buffer_sizes(self) -> dict[str, int]:
        """Entries held in each of the exchange's (and its transport's) caches."""
        v = self.verifier
        return {"pool": len(self._pool), "pool_bytes": len(self._bytes), "sender_bytes": len(self._sender_bytes),
                "batches": len(self._batches), "peers": len(self.peers), "groups_in": len(self.stats.groups_in),
                "groups_used": len(self.stats.groups_used), "rejected": len(self.stats.rejected),
                "verifier_senders": len(v._senders), "verifier_entries": v.remembered(),
                **{f"transport.{k}": n for k, n in self.transport.buffer_sizes().items()}}

    def status(self) -> dict:
        s = self.stats
        return {
            "peer_id": self.peer_id,
            "peers_alive": self.peers_alive(),
            "peers_heard": len(s.groups_in),
            "peers_used": len(s.groups_used),
            "envelopes_in": s.envelopes_in,
            "envelopes_out": s.envelopes_out,
            "rollouts_out": s.rollouts_out,
            "groups_in": sum(s.groups_in.values()),
            "groups_used": sum(s.groups_used.values()),
            "groups_used_by_peer": dict(s.groups_used),
            "groups_in_by_peer": dict(s.groups_in),
            "pool": len(self._pool),
            "pool_bytes": self._pool_bytes,
            "dropped_stale": s.dropped_stale,
            "dropped_full": s.dropped_full,
            "dropped_long": s.dropped_long,
            "rejected": dict(s.rejected + self.transport.rejected),
            "rejected_total": sum(s.rejected.values()) + sum(self.transport.rejected.values()),
            "publish_errors": s.publish_errors,
            "heartbeat_errors": s.heartbeat_errors,
            "poll_errors": s.poll_errors,
            "publish_skipped": s.publish_skipped,
            "publish_timeouts": s.publish_timeouts,
            "internal_errors": s.internal_errors,
            **self.link.status(),
            **self.transport.info(),
        }
