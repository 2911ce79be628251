"""What the gossip gate found for a message that passed, kept until the node polls that message.

Over a carrier that forwards (gossipsub), every message is checked twice: the validator runs the
exchange's ``gate`` before passing it on, and the node checks it again when it polls it from the
inbox. What the exact bytes decide (signature, decoding, every record, the tasks, the tokenizer
verdict: ~0.1 s for a 4 MiB batch) cannot change in between, so ``gate`` stores its verdict here
and the poll's check takes it back; the exchange re-runs only what depends on time and state
(node/swarm/admission.py ``Admission.recheck``, ``still_fresh``).

An entry is keyed by (publisher, round, sha256 of the exact bytes): a copy under another
publisher or round, or bytes that differ by one bit, miss. It is used at most once (``pop``).
Memory is bounded whatever peers send: at most ``max_entries`` entries standing for at most
``max_bytes`` of messages (the oldest go first), and none older than ``max_age_s``: a message
the inbox dropped is never polled, and its verdict must not outlive it. A verdict let go costs
only CPU: its message, if polled, is checked in full.

Thread-safe: ``gate`` runs in the carrier's worker threads, the poll's check in another.
"""

from __future__ import annotations

import collections
import hashlib
import threading
import time
from dataclasses import dataclass
from typing import Callable, Generic, TypeVar

from swarm_node.node.transport.base import Delivery

__all__ = ["VerdictCache", "MAX_VERDICTS", "MAX_VERDICT_BYTES", "MAX_HEARTBEAT_VERDICTS",
           "MAX_HEARTBEAT_VERDICT_BYTES", "VERDICT_AGE_ROUNDS"]

# Between two polls (a quarter second) a handful of messages pass the gate; these bound a flood of
# messages that pass but are never polled. A rollout verdict holds the decoded batch and its payload
# (4.75 times the encoded size, measured on a 3.4 MiB batch; up to about 7 times for short token ids
# and float log-probs): 16 MiB of messages stand for ~110 MiB at most. A verdict evicted early only
# costs that message a second full check.
MAX_VERDICTS = 256
MAX_VERDICT_BYTES = 16 << 20
MAX_HEARTBEAT_VERDICTS = 1024  # heartbeats are polled every half round, one per peer
MAX_HEARTBEAT_VERDICT_BYTES = 4 << 20
# A batch of round current + 1 (the furthest ahead the gate passes) is polled once that round is
# current: within a round and a poll. Older verdicts stand for messages the inbox let go.
VERDICT_AGE_ROUNDS = 2

V = TypeVar("V")


@dataclass(frozen=True)
class _Entry(Generic[V]):
    verdict: V
    size: int  # bytes of the message it stands for
    at: float  # when it was stored (the cache's clock)


def _key(d: Delivery) -> tuple[str, int, bytes]:
    return d.publisher, d.round, hashlib.sha256(d.data).digest()


class VerdictCache(Generic[V]):
    """Verdicts on messages that passed, by (publisher, round, sha256 of the bytes), each used once.

    ``counts``: ``stored`` (by the gate), ``hits`` (a poll's check took one), ``misses`` (a poll's
    check found none: a carrier with no gate, or a verdict let go), ``expired`` (older than
    ``max_age_s``) and ``evicted`` (pushed out by the entry or byte bound)."""

    def __init__(self, max_entries: int, max_bytes: int, max_age_s: float,
                 clock: Callable[[], float] = time.monotonic):
        self.max_entries, self.max_bytes, self.max_age_s = max_entries, max_bytes, max_age_s
        self._clock = clock
        self._entries: collections.OrderedDict[tuple[str, int, bytes], _Entry[V]] = collections.OrderedDict()
        self._bytes = 0
        self._lock = threading.Lock()
        self.counts: collections.Counter[str] = collections.Counter()

    @classmethod
    def for_rollouts(cls, round_seconds: float) -> VerdictCache:
        """The exchange's cache of rollout batch verdicts (``Admitted``), for rounds of ``round_seconds``."""
        return cls(MAX_VERDICTS, MAX_VERDICT_BYTES, VERDICT_AGE_ROUNDS * round_seconds)

    @classmethod
    def for_heartbeats(cls, round_seconds: float) -> VerdictCache:
        """The exchange's cache of opened heartbeats (envelope, ``Announcement``)."""
        return cls(MAX_HEARTBEAT_VERDICTS, MAX_HEARTBEAT_VERDICT_BYTES, VERDICT_AGE_ROUNDS * round_seconds)

    def put(self, d: Delivery, verdict: V) -> None:
        """Keep ``verdict`` on ``d`` (replacing one on the same bytes) until ``pop``, bounds or age."""
        if len(d.data) > self.max_bytes:
            return  # could only push everything else out
        key = _key(d)  # hashing a 4 MiB body takes milliseconds: outside the lock
        with self._lock:
            now = self._clock()
            self._drop(key)
            self._entries[key] = _Entry(verdict, len(d.data), now)  # the newest last: order is age
            self._bytes += len(d.data)
            self.counts["stored"] += 1
            self._expire(now)
            while len(self._entries) > self.max_entries or self._bytes > self.max_bytes:
                self._drop(next(iter(self._entries)))
                self.counts["evicted"] += 1

    def pop(self, d: Delivery) -> V | None:
        """The verdict stored on exactly ``d``'s publisher, round and bytes, taken out; None if none."""
        key = _key(d)
        with self._lock:
            self._expire(self._clock())
            entry = self._drop(key)
            self.counts["hits" if entry is not None else "misses"] += 1
        return None if entry is None else entry.verdict

    def expire(self) -> None:
        """Let go of verdicts older than ``max_age_s`` (also done on every put and pop)."""
        with self._lock:
            self._expire(self._clock())

    def __len__(self) -> int:
        return len(self._entries)

    @property
    def bytes(self) -> int:
        """Bytes of the messages the held verdicts stand for."""
        return self._bytes

    def _expire(self, now: float) -> None:
        while self._entries:
            key, entry = next(iter(self._entries.items()))
            if now - entry.at <= self.max_age_s:
                break
            self._drop(key)
            self.counts["expired"] += 1

    def _drop(self, key: tuple[str, int, bytes]) -> _Entry[V] | None:
        entry = self._entries.pop(key, None)
        if entry is not None:
            self._bytes -= entry.size
        return entry
