"""Swarm sampling (SAPO): publish this node's rollouts each round, admit peers' rollouts, and hand
the learner J peer groups per training step.

``SwarmExchange`` sits between the trainer and a ``Transport``. Outgoing, it wraps a round's
rollouts in a ``RolloutBatch``, signs it (``protocol.signing``) and publishes it under
``(swarm, round, peer id)``, and sends signed heartbeats. Incoming, a background task polls the
transport for the rounds still inside the staleness window and runs every envelope through the
admission checks (node/swarm/admission.py: the checks, their order, the reasons counted); what
passes is pooled (node/swarm/pool.py), and ``take`` hands a step up to J groups.

The checks run in a worker thread (``admit_off_loop``), so a 4 MiB batch does not stall
heartbeats, the trainer or the status display; state changes on the event loop (``_commit``). Over
a carrier that forwards (gossipsub), ``gate`` checks a message before it is passed on and keeps
its verdict (node/swarm/verdicts.py): polling it re-runs only what time or state may have changed. An
envelope is remembered for replay detection only once every check has passed, so a copy of an
honest envelope that fails a later check (re-published under another round) cannot get the honest
delivery refused as a replay. Groups older than ``max_round_lag`` rounds are dropped and counted
(``stats.dropped_stale``), not rejected: they were honest, only late.
"""

from __future__ import annotations

import asyncio
import logging
import random
import time
from typing import Callable, Mapping, Sequence

from swarm_node.node.clock import RoundClock
from swarm_node.node.swarm import limits
from swarm_node.node.swarm.admission import NOT_REJECTIONS, SENDER_FAULTS, Admission, Admitted, Refused, open_message, still_fresh
from swarm_node.node.swarm.clock_offset import DELIVERY_ALLOWANCE_S, ClockWatch
from swarm_node.node.swarm.limits import envelope_ttl, envelopes_wanted, heartbeat_ttl, usable_envelope_bytes
from swarm_node.node.swarm.link import SwarmLink
from swarm_node.node.swarm.peer_work import PeerWork
from swarm_node.node.swarm.pool import AdmittedGroup, PeerPool
from swarm_node.node.swarm.selection import sender_cap
from swarm_node.node.swarm.stats import SwarmStats, bump
from swarm_node.node.swarm.unusable import UnusableRuns
from swarm_node.node.swarm.verdicts import VerdictCache
from swarm_node.node.transport.base import Delivery, Transport
from swarm_node.protocol.codec import encode
from swarm_node.protocol.identity import Identity
from swarm_node.protocol.messages import Announcement, RolloutBatch, RolloutRecord
from swarm_node.protocol.signing import Envelope, Verifier, envelope_to_bytes, next_seq, sign
from swarm_node.rewards.scoring import RewardConfig
from swarm_node.rewards.task import Task

log = logging.getLogger(__name__)

__all__ = ["SwarmExchange", "SwarmStats"]


class SwarmExchange:
    def __init__(self, transport: Transport, identity: Identity, clock: RoundClock, *,
                 tokenizer_fingerprint: str, model_fingerprint: str, vocab_size: int,
                 decode_text: Callable[[Sequence[int]], str], group_cap: int = 64,
                 max_round_lag: int = 4, poll_seconds: float = 0.25, max_clock_skew: float = 30.0,
                 seed: int = 0, special_ids: frozenset[int] = frozenset(), eos_id: int | None = None,
                 external_groups: int | None = None, max_sender_share: float = 0.5,
                 max_tokens: int | None = None, select: str = "fresh", reward_cfg: RewardConfig = RewardConfig(),
                 held_out: Callable[[Task], bool] | None = None):
        self.transport = transport
        self.identity = identity
        self.clock = clock
        self.tokenizer_fingerprint = tokenizer_fingerprint
        self.model_fingerprint = model_fingerprint
        self.admission = Admission(tokenizer_fingerprint=tokenizer_fingerprint, vocab_size=vocab_size,
                                   decode_text=decode_text, special_ids=frozenset(special_ids), eos_id=eos_id,
                                   group_cap=group_cap, max_tokens=max_tokens, max_round_lag=max_round_lag,
                                   reward_cfg=reward_cfg, held_out=held_out)
        # Bodies bigger than all this node could use are not fetched (max_tokens None: no bound).
        self.max_body = usable_envelope_bytes(max_tokens)
        self.max_round_lag = max_round_lag
        self.poll_seconds = poll_seconds
        # J: what the trainer takes a step, hence what is worth fetching a round (None: everything)
        self.external_groups = external_groups
        self.max_sender_share = max_sender_share
        self.select = select  # which groups a step takes first (node/swarm/selection.py RULES)
        self._groups_per_envelope = 1.0  # running mean over admitted envelopes: sizes the fetch budget
        # An honest envelope may be fetched up to the whole window after it was signed, so the
        # clock check allows the window on top of the configured skew.
        self.verifier = Verifier(max_skew_s=max_clock_skew + (max_round_lag + 1) * clock.round_seconds)
        # What ``gate`` found on a message that passed, so that polling it checks it once (node/swarm/verdicts.py).
        self.verdicts: VerdictCache[Admitted] = VerdictCache.for_rollouts(clock.round_seconds)
        self.heartbeat_verdicts: VerdictCache[tuple[Envelope, Announcement]] = VerdictCache.for_heartbeats(
            clock.round_seconds)
        self.stats = SwarmStats()
        self.work = PeerWork()  # rounds of each peer trained on, with a gradient (the peer cache ranks by it)
        self.unusable = UnusableRuns()  # senders sending nothing this node can use, round after round
        self.pool = PeerPool(random.Random(f"swarm-exchange:{seed}:{identity.peer_id}"))
        self._batches: set[tuple[str, int]] = set()  # (sender, round) admitted, inside the window
        self._arrived = asyncio.Event()
        self._seq = 0
        self._task: asyncio.Task | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self.peers: dict[str, Announcement] = {}  # sender -> latest verified heartbeat
        self._last_heartbeat_poll = 0.0
        # This clock against peers' signed heartbeats (polled every half round): warned of once.
        # Peers trained on in MIN_ROUNDS rounds have standing there: heartbeat-only keys cannot outvote them.
        self.clock_watch = ClockWatch(clock.round_seconds, uncertainty=clock.round_seconds / 4 + DELIVERY_ALLOWANCE_S,
                                      standing=self.work.proven)
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
        self._seq = next_seq(self._seq)
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
        expires_in = envelope_ttl(self.max_round_lag, self.clock.round_seconds)
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
        return heartbeat_ttl(self.clock.round_seconds)

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
        for cache in (self.verdicts, self.heartbeat_verdicts):
            cache.expire()  # verdicts on messages never polled go, even if no new one comes
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
                self.clock_watch.polled(self._last_heartbeat_poll)
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

    def admit_announcement(self, d: Delivery) -> bool:
        """Verify a heartbeat (same signature, replay and schema rules as rollouts); one ``gate``
        opened is checked again only for what time may have changed (its clock and replay)."""
        try:
            opened = self.heartbeat_verdicts.pop(d)
            if opened is None:
                env, msg = open_message(d, Announcement, self.verifier)
            else:
                env, msg = opened
                still_fresh(env, self.verifier)
        except Refused as r:
            return bool(self._reject(r.reason, d, r.detail))
        if not self.verifier.commit(env):
            return bool(self._reject("replay", d))
        if msg.sender not in self.peers and len(self.peers) >= limits.MAX_TRACKED_PEERS:
            # Keys are free: a flood of fresh identities must not grow this without bound. The
            # heartbeat heard longest ago makes room (it is the next to expire anyway).
            del self.peers[min(self.peers, key=lambda k: self.peers[k].created_at)]
        self.peers[msg.sender] = msg
        if warning := self.clock_watch.heard_now(msg.sender, env.timestamp):
            log.warning("%s", warning)
        return True

    def gate(self, d: Delivery) -> bool:
        """Every check a message must pass that needs no change of state, for a carrier that
        forwards messages (gossipsub's validator): False stops it here, counted as ``admit``
        would count it (on the loop: this runs in the carrier's worker thread). A message passed
        on still goes through ``admit`` when polled; only that one remembers it, and it reuses
        what was found here on the same bytes (``verdicts``)."""
        if d.round < 0:
            try:
                self.heartbeat_verdicts.put(d, open_message(d, Announcement, self.verifier))
                return True
            except Refused as r:
                checked = r
        else:
            checked = self.admission.check_batch(d, self.verifier, self.clock.current(), self._batches)
            if isinstance(checked, Admitted):
                self.verdicts.put(d, checked)
                return True
            if checked.reason in NOT_REJECTIONS:
                return True  # late, or of families this node lacks: others may use it (``admit`` counts it)
        self._loop.call_soon_threadsafe(self._commit, d, checked)
        return False

    def _drop(self, d: Delivery, checked: Refused) -> int:
        """A batch refused for no fault (``NOT_REJECTIONS``): its groups are counted as dropped.
        One of families this node lacks costs its sender a back-off after a sustained run."""
        if checked.reason == "stale":  # honest, only late
            self.stats.dropped_stale += int(checked.detail)
            return 0
        self.stats.dropped_unknown_family += int(checked.detail)
        self.stats.unusable_batches += 1
        if self.unusable.unusable(d.publisher, d.round) and self.transport.distrust(d.publisher, d.round):
            self.stats.unusable_backed_off += 1
            log.info("%.48s sent nothing this node can use (task families it has not loaded) in %d rounds "
                     "in a row: backed off", d.publisher, self.unusable.run_of(d.publisher))
        return 0

    def admit(self, d: Delivery) -> int:
        """Run one delivery through every admission check; returns the groups admitted."""
        return self._commit(d, self._check(d))

    async def admit_off_loop(self, d: Delivery) -> int:
        """``admit`` with its expensive part (signature, decoding, every record's checks and text
        decoding: ~0.1 s for a full 4 MiB batch) in a worker thread, so a large batch does not
        stall heartbeats, the trainer or the status display; the pool changes on the loop."""
        checked = await asyncio.to_thread(self._check, d)
        return self._guarded(lambda d: self._commit(d, checked), d)

    def _check(self, d: Delivery) -> Admitted | Refused:
        """Every check of a rollout batch that needs no change of state; on bytes ``gate`` passed,
        only those that time or state may have changed since (``Admission.recheck``)."""
        cached = self.verdicts.pop(d)
        if cached is not None:
            return self.admission.recheck(cached, self.verifier, self.clock.current(), self._batches)
        return self.admission.check_batch(d, self.verifier, self.clock.current(), self._batches)

    def _commit(self, d: Delivery, checked: Admitted | Refused) -> int:
        """Count a refusal, or remember the envelope and pool its groups (on the event loop)."""
        if isinstance(checked, Refused):
            if checked.reason in NOT_REJECTIONS:
                return self._drop(d, checked)
            if checked.reason in SENDER_FAULTS:
                self.transport.distrust(d.publisher, d.round)
            return self._reject(checked.reason, d, checked.detail)
        msg, groups = checked.batch, checked.groups
        if (msg.sender, msg.round) in self._batches:  # admitted while this one was being checked
            return self._reject("duplicate_round", d)
        if not self.verifier.commit(checked.envelope):
            return self._reject("replay", d)
        self.stats.dropped_long += checked.dropped_long
        self.stats.dropped_held_out += checked.dropped_held_out
        self.stats.dropped_unknown_family += checked.dropped_unknown_family
        self._batches.add((msg.sender, msg.round))
        self.stats.envelopes_in += 1
        if not groups:  # nothing this node can use: it earns no fetch slot, nor sizes the budget
            return 0
        self.unusable.usable(msg.sender)
        self.transport.admitted(msg.sender, msg.round)
        # What one envelope can give a step: a sender cannot supply more than its share, so a
        # batch of 64 groups must not shrink the fetch budget (nor one of 1 grow it past J).
        usable = len(groups) if self.external_groups is None else min(
            len(groups), sender_cap(self.external_groups, self.max_sender_share))
        self._groups_per_envelope += (usable - self._groups_per_envelope) / min(self.stats.envelopes_in, 20)
        for g in groups:
            self.pool.add(g)
            bump(self.stats.groups_in, msg.sender)
        self.stats.dropped_full += self.pool.bound(msg.sender)
        return len(groups)

    # -- sampling -------------------------------------------------------------------------------
    def _prune(self, current: int) -> None:
        oldest = current - self.max_round_lag
        self.stats.dropped_stale += self.pool.prune(oldest)
        self._batches = {b for b in self._batches if b[1] >= oldest}

    def available(self, current: int | None = None) -> int:
        r = self.clock.current() if current is None else current
        self._prune(r)
        return len(self.pool)

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

    def take(self, n: int, current: int | None = None, extra: int = 0,
             weakness: Mapping[str, float] | None = None) -> list[AdmittedGroup]:
        """Up to ``n`` unused groups of the window at round ``current`` (PeerPool.take by the
        ``select`` rule, spread across senders, at most ``max_sender_share`` of ``n`` from one),
        and up to ``extra`` informative ones more within the same per-sender bound (``weakness``:
        the ``weakest`` rule's family -> this node's running correctness)."""
        r = self.clock.current() if current is None else current
        self._prune(r)
        picked = self.pool.take(n, self.max_sender_share, self.select, extra, weakness)
        for g in picked:
            bump(self.stats.groups_used, g.sender)
            self.work.trained(g.sender, r, g.informative)  # our round, not its label (node/swarm/peer_work.py)
        return picked

    def buffer_sizes(self) -> dict[str, int]:
        """Entries held in each of the exchange's (and its transport's) caches."""
        v = self.verifier
        return {"pool": len(self.pool), "pool_bytes": len(self.pool.sizes), "sender_bytes": len(self.pool.sender_bytes),
                "batches": len(self._batches), "peers": len(self.peers), "groups_in": len(self.stats.groups_in),
                "groups_used": len(self.stats.groups_used), "work": len(self.work), "unusable": len(self.unusable), "rejected": len(self.stats.rejected),
                "verifier_senders": len(v._senders), "verifier_entries": v.remembered(),
                "verdicts": len(self.verdicts), "heartbeat_verdicts": len(self.heartbeat_verdicts),
                **{f"transport.{k}": n for k, n in self.transport.buffer_sizes().items()}}

    def status(self) -> dict:
        s = self.stats
        return {
            "peer_id": self.peer_id,
            "peers_alive": self.peers_alive(),
            "pool": len(self.pool),
            "pool_bytes": self.pool.bytes,
            **s.counts(),
            "rejected": dict(s.rejected + self.transport.rejected),
            "rejected_total": sum(s.rejected.values()) + sum(self.transport.rejected.values()),
            "clock_offset_s": self.clock_watch.offset(),
            # checked once over gossip: hits are polled messages whose gate verdict was reused
            "verdicts": {"rollouts": dict(self.verdicts.counts), "heartbeats": dict(self.heartbeat_verdicts.counts)},
            **self.link.status(),
            **self.transport.info(),
        }
