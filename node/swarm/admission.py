"""What a peer's message must satisfy to be admitted, and the reason counted when it does not.

``open_message`` holds the checks every message passes; ``Admission.check_batch`` those of a
rollout batch, and turns what passes into ``AdmittedGroup``s (node/swarm/pool.py) carrying what
was decided here, once: the group's first ``group_cap`` completions this node could train on, its
task regenerated from the id, and whether the peer's tokenizer is this node's (``same_tokenizer``).
None of it changes state: it may run in a worker thread, and the exchange (node/swarm/exchange.py)
remembers and pools what passed. Bytes already admitted by the gossip gate are not checked twice:
``Admission.recheck`` and ``still_fresh`` re-run only what time or state may have changed.

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
    task id in the held-out (evaluation) space    held_out_task
    token ids outside this vocabulary, empty      bad_tokens
    a special token but a final EOS (same tok.)   special_tokens
    a token log-prob below MIN_TOKEN_LOGPROB      implausible_logprob
    text ≠ decode(token ids) (same tokenizer)     text_mismatch
    created_at ≠ signed envelope time (± 5 s)     created_at_mismatch   (any message)

A batch every group of which is of a task family this node has not loaded (another dataset, or
another version of it) is refused as ``unknown_family``: not pooled, but no rejection (an honest
peer may train on other data) and, over gossip, passed on (others may hold the family): its
groups are counted as ``dropped_unknown_family``, and a sustained run of such batches backs its
sender off where the carrier pays per fetch (node/swarm/unusable.py). A batch with some usable
group keeps it and drops the rest.

CPU is bounded: only what could be used is checked (a group's first ``group_cap`` records no
longer than the node trains on, ``max_tokens``; nothing of a batch already too old for the window,
or a second one from a sender and round). Transports add their own refusals before any of this:
``oversized`` (a body declared or framed larger than all this node could use,
``usable_envelope_bytes``, or than the message limit) and ``hash_mismatch`` (a body that is not
what its index record announced).

Nothing a peer claims about quality is used: the protocol has no reward or ground-truth fields
(a message carrying one fails as ``unknown_field``) and the learner re-scores every admitted
completion against the regenerated task. Admission scores them too, with this node's reward
(``AdmittedGroup.rewards``), only to choose which groups a step takes (node/swarm/selection.py).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Sequence

from swarm_node.node.swarm.limits import MAX_CREATED_DRIFT_S, MAX_GROUPS_PER_BATCH, MAX_TEXT_BYTES_PER_TOKEN
from swarm_node.node.swarm.pool import AdmittedGroup
from swarm_node.node.transport.base import Delivery
from swarm_node.protocol.codec import decode
from swarm_node.protocol.errors import MessageTooLarge, ProtocolError, UnknownField, UnsupportedVersion
from swarm_node.protocol.messages import MIN_TOKEN_LOGPROB, Announcement, RolloutBatch, RolloutRecord, same_tokenizer
from swarm_node.protocol.signing import Envelope, Verifier, VerifyResult, envelope_from_bytes
from swarm_node.protocol.task_id import TaskId
from swarm_node.rewards.errors import TaskError, UnknownTaskFamily
from swarm_node.rewards.held_out import is_held_out
from swarm_node.rewards.registry import get_family, make_task
from swarm_node.rewards.scoring import RewardConfig, score
from swarm_node.rewards.task import Task

__all__ = ["REJECT_REASONS", "SENDER_FAULTS", "NOT_REJECTIONS", "Refused", "Admitted", "Admission", "open_message",
           "still_fresh", "allowed_specials"]

REJECT_REASONS = (
    "malformed_envelope", "bad_signature", "sender_mismatch", "stale_clock", "replay", "oversized",
    "malformed", "unknown_field", "unsupported_version", "wrong_kind", "wrong_round", "bad_task",
    "bad_tokens", "special_tokens", "implausible_logprob", "text_mismatch", "duplicate_round",
    "too_many_groups", "created_at_mismatch", "held_out_task",
    "hash_mismatch",  # counted by a transport: the body does not match its index record
)

# Refusals that are the sender's own doing whatever its clock or restarts: the carrier backs it
# off (replay, duplicate_round and stale_clock can happen to an honest node that restarted or
# whose clock drifts, so they are only counted).
SENDER_FAULTS = frozenset(REJECT_REASONS) - {"replay", "duplicate_round", "stale_clock", "oversized", "hash_mismatch"}

# Refusals that are not rejections (an honest peer sends them): the exchange counts their groups
# as dropped, and gossip passes them on (a batch late here, or of families this node lacks, may
# still be of use to others).
NOT_REJECTIONS = frozenset({"stale", "unknown_family"})

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


def allowed_specials(ids: Sequence[int], special_ids: frozenset[int], eos_id: int | None) -> bool:
    """True if ``ids`` holds no special token except, as its last token, EOS. The one rule for
    both sides: a node publishes only completions its peers will admit (node/run/rollouts.py)."""
    if not special_ids:
        return True
    return not any(t in special_ids for t in ids[:-1]) and (ids[-1] not in special_ids or ids[-1] == eos_id)


class Refused(Exception):
    """An admission check failed: counted under ``reason`` (REJECT_REASONS) by the exchange.
    Two are no rejection, their group count in ``detail``: ``stale``, a batch too old for the
    window, and ``unknown_family``, a batch of families this node has not loaded (``NOT_REJECTIONS``)."""

    def __init__(self, reason: str, detail: str = ""):
        super().__init__(reason)
        self.reason, self.detail = reason, detail


@dataclass(frozen=True)
class Admitted:
    """A rollout batch that passed every check: the groups it adds, and how many completions were
    left out for length (neither checked nor kept)."""

    envelope: Envelope
    batch: RolloutBatch
    groups: list[AdmittedGroup]
    dropped_long: int
    dropped_held_out: int = 0  # groups asking a question this node evaluates on (rewards/reserved.py)
    dropped_unknown_family: int = 0  # groups of a task source this node has not loaded (rewards/sources.py)


def _known_families(groups: dict[str, list[RolloutRecord]]) -> tuple[dict[str, list[RolloutRecord]], int]:
    """The groups of families this node has, and how many others it leaves out: a peer training on
    a dataset or module this node has not loaded, or another version of it (the family's name
    carries its content's digest, rewards/sources.py), is honest, and its other groups count. A
    malformed id stays in, for ``_check_group`` to refuse (bad_task)."""
    known, unknown = {}, 0
    for task_id, records in groups.items():
        try:
            get_family(TaskId.parse(task_id).family)
        except UnknownTaskFamily:
            unknown += 1
            continue
        except TaskError:
            pass
        known[task_id] = records
    return known, unknown


def open_message(d: Delivery, kind: type, verifier: Verifier) -> tuple[Envelope, RolloutBatch | Announcement]:
    """The checks every message passes: framing, publisher, signature, clock, replay (not yet
    remembered), decoding, kind and header sender. Raises ``Refused`` when one fails. Reads the
    replay memory, changes nothing, so it may run off the event loop."""
    env = envelope_from_bytes(d.data)
    if env is None:
        raise Refused("malformed_envelope")
    if env.sender != d.publisher:
        raise Refused("sender_mismatch", f"published under {d.publisher}, signed by {env.sender}")
    verdict = verifier.verify(env, commit=False)
    if verdict is not VerifyResult.ACCEPTED:
        raise Refused(_VERIFY_REASON[verdict])
    try:
        msg = decode(env.payload)
    except ProtocolError as e:
        raise Refused(_decode_reason(e), str(e)) from None
    if not isinstance(msg, kind):
        raise Refused("wrong_kind", type(msg).__name__)
    if msg.sender != env.sender:
        raise Refused("sender_mismatch", f"header says {msg.sender}")
    # created_at is the sender's claim; the envelope's timestamp is signed and clock-checked
    # by the verifier. Anything that reads created_at (heartbeat expiry) may then trust it.
    if abs(msg.created_at - env.timestamp) > MAX_CREATED_DRIFT_S:
        raise Refused("created_at_mismatch", f"created_at {msg.created_at:.0f} vs signed {env.timestamp:.0f}")
    return env, msg


def still_fresh(env: Envelope, verifier: Verifier, now: float | None = None) -> None:
    """What of ``open_message`` can change once it passed on the same bytes: the envelope's clock
    and replay (read, not remembered). Raises ``Refused`` as ``open_message`` would now."""
    verdict = verifier.verify_fresh(env, now)
    if verdict is not VerifyResult.ACCEPTED:
        raise Refused(_VERIFY_REASON[verdict])


@dataclass(frozen=True)
class Admission:
    """This node's rules for a peer's rollout batch, from its own tokenizer and limits."""

    tokenizer_fingerprint: str
    vocab_size: int
    decode_text: Callable[[Sequence[int]], str]
    # Special tokens are invisible to the text check (decoding skips them): only a final EOS
    # may be one, so a completion cannot smuggle <pad> or a chat-template token past it.
    special_ids: frozenset[int]
    eos_id: int | None
    group_cap: int  # completions kept per group: this node's group size
    # Completions longer than this node trains on (its max_completion_length) are dropped here
    # (None: no bound).
    max_tokens: int | None
    max_round_lag: int
    # This node's reward: each kept completion is scored here once, so the pool can prefer groups
    # whose rewards vary (AdmittedGroup.rewards, node/swarm/selection.py). Text only: cheap.
    reward_cfg: RewardConfig = RewardConfig()
    # True for a task asking one of this node's held-out questions (rewards/reserved.py
    # HeldOutSet.holds): such a group is dropped, the rest of the batch kept. No fault of the
    # sender's: its node may evaluate on other questions. (A held-out *seed* is: held_out_task.)
    held_out: Callable[[Task], bool] | None = None

    def check_batch(self, d: Delivery, verifier: Verifier, current: int,
                    batches: set[tuple[str, int]]) -> Admitted | Refused:
        """Every check of a rollout batch that needs no change of state, at round ``current`` with
        ``batches`` the (sender, round) already admitted: what it adds, or the refusal."""
        try:
            env, msg = open_message(d, RolloutBatch, verifier)
            if msg.round != d.round or msg.round > current + 1:
                raise Refused("wrong_round", f"batch says round {msg.round}")
            if (msg.sender, msg.round) in batches:
                raise Refused("duplicate_round")
            by_task: dict[str, list[RolloutRecord]] = {}
            for rec in msg.rollouts:
                by_task.setdefault(rec.task_id, []).append(rec)
            if len(by_task) > MAX_GROUPS_PER_BATCH:
                raise Refused("too_many_groups", f"{len(by_task)} tasks")
            if msg.round < current - self.max_round_lag:
                raise Refused("stale", str(len(by_task)))  # could never be used: not checked further
            by_task, unknown = _known_families(by_task)
            if unknown and not by_task:  # nothing here this node could ever use
                raise Refused("unknown_family", str(unknown))
            token_level = same_tokenizer(msg.tokenizer_fingerprint, self.tokenizer_fingerprint)
            by_task, dropped_long = self._usable(by_task, token_level)
            groups = [  # the whole batch is refused if any record fails
                self._admitted(msg, task_id, records, token_level) for task_id, records in by_task.items()]
        except Refused as r:
            return r
        kept = [g for g in groups if self.held_out is None or not self.held_out(g.task)]
        return Admitted(env, msg, kept, dropped_long, len(groups) - len(kept), unknown)

    def recheck(self, admitted: Admitted, verifier: Verifier, current: int, batches: set[tuple[str, int]],
                now: float | None = None) -> Admitted | Refused:
        """``check_batch`` again on the exact bytes it admitted (a verdict the gossip gate cached,
        node/swarm/verdicts.py), at round ``current`` with ``batches`` admitted: only what depends
        on time or state runs, in ``check_batch``'s order, so the outcome is the one it would give
        now. What the bytes alone decide (signature, decoding, records, tasks, the tokenizer
        verdict) is reused; replay is decided again when the exchange commits."""
        msg = admitted.batch
        try:
            still_fresh(admitted.envelope, verifier, now)
            if msg.round > current + 1:  # the round it names was checked; the clock may have stepped back
                raise Refused("wrong_round", f"batch says round {msg.round}")
            if (msg.sender, msg.round) in batches:
                raise Refused("duplicate_round")
            if msg.round < current - self.max_round_lag:
                raise Refused("stale", str(len({rec.task_id for rec in msg.rollouts})))
        except Refused as r:
            return r
        return admitted

    def _usable(self, groups: dict[str, list[RolloutRecord]], token_level: bool
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
            fits = [r for r in recs if (len(r.completion_ids) <= self.max_tokens if token_level
                                        else len(r.completion_text.encode()) <= text_limit)]
            dropped += len(recs) - len(fits)
            if fits:
                kept[t] = fits[:self.group_cap]
        return kept, dropped

    def _admitted(self, msg: RolloutBatch, task_id: str, records: list[RolloutRecord],
                  token_level: bool) -> AdmittedGroup:
        """One group that passed ``_check_group``, with its completions scored by this node's reward
        (a foreign tokenizer's text the same way: scoring reads text only)."""
        task = self._check_group(task_id, records, token_level)
        try:
            rewards = tuple(score(task, r.completion_text, self.reward_cfg).total for r in records)
        except TaskError as e:  # a user's scorer failed on its own ground truth (rewards/sources.py)
            raise Refused("bad_task", str(e)) from None
        return AdmittedGroup(msg.sender, msg.round, msg.policy_version, msg.model_fingerprint,
                             msg.tokenizer_fingerprint, task_id, tuple(records), task=task, token_level=token_level,
                             rewards=rewards)

    def _check_group(self, task_id: str, records: list[RolloutRecord], token_level: bool) -> Task:
        """The group's task, regenerated from its id, once every record has passed; or ``Refused``."""
        try:
            task = make_task(task_id)
        except TaskError as e:
            raise Refused("bad_task", str(e)) from None
        # An honest node never draws a held-out seed (rewards/held_out.py): one sent here would
        # train this node on the questions its evaluation asks. A sender fault.
        if is_held_out(task.id.seed):
            raise Refused("held_out_task", f"task {task_id}")
        for rec in records:
            if not rec.completion_ids or (token_level and max(rec.completion_ids) >= self.vocab_size):
                raise Refused("bad_tokens", f"task {task_id}")
            if token_level and not allowed_specials(rec.completion_ids, self.special_ids, self.eos_id):
                raise Refused("special_tokens", f"task {task_id}")
            if min(rec.behaviour_logprobs) < MIN_TOKEN_LOGPROB:
                raise Refused("implausible_logprob",
                              f"task {task_id}: {min(rec.behaviour_logprobs):g} < {MIN_TOKEN_LOGPROB:g}")
            if token_level:
                try:
                    text = self.decode_text(rec.completion_ids)
                except Exception:  # noqa: BLE001 - a tokenizer's error on hostile ids
                    raise Refused("bad_tokens", f"task {task_id}: ids do not decode") from None
                if text != rec.completion_text:
                    raise Refused("text_mismatch", f"task {task_id}")
        return task
