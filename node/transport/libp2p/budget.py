"""What a gossip validator may spend on checks, decided before the costly check runs.

Gossipsub asks this node to validate every message before it forwards it, and the node's whole
admission check (signature, decoding, every record's tokens and texts) costs milliseconds to
tens of milliseconds a body. Keys are free, so a stranger can sign as many well-formed messages
as a connection carries; py-libp2p runs at most 10 validations at once and refuses (and caches
as invalid) whatever waits past 5 s. Without a budget a flood of fresh identities would push an
honest peer's message past that timeout. ``CheckBudget`` decides, in microseconds and before any
thread hop, whether a message is worth a full check:

- a publisher with an admitted history (``vouched``) is always checked, within its share: at
  most ``per_round`` bodies a round (a restarted node republishes once; the inbox hands over no
  more anyway) and one heartbeat every ``heartbeat_gap_s``;
- every other publisher shares ``strangers_per_s`` checks a second (burst ``strangers_burst``: a
  token bucket, node/transport/ratelimit.py's, full at the first stranger), on top of the same
  per-publisher limits. A newcomer competes with a flood for that share, as
  over hivemind (where a node explores one unknown publisher every few rounds): it is admitted
  more slowly under a flood, never shut out, and once admitted in a few rounds it is vouched.

A heartbeat's gap is charged only to one newer than the publisher's last accepted heartbeat (its
signed timestamp, read unverified: pubsub's signature already binds the bytes to their origin),
and given back when the full check refuses it (``heartbeat_checked``): an old heartbeat replayed
past pubsub's seen cache is dropped (``heartbeat_replay``) or refused, and the publisher's real
one still gets through.

Rounds are bounded around the newest round the node has polled (``newest``): more than
``AHEAD`` past it is refused (the node's admission would refuse it as ``wrong_round``, and far-future
rounds must not push the current rounds' counts out), and rounds older than the ``MAX_ROUNDS``
kept are refused as outside the window. The slack lets a node that polls late still forward
the rounds its neighbours are on.

What is refused here is dropped and not forwarded (a stranger's message dropped under a flood
may reach its other neighbours, which have their own budgets). Memory is bounded: per-round
counts for the rounds asked about recently (``MAX_ROUNDS``) and at most ``MAX_PUBLISHERS`` per
round and heartbeat stamps.

Owned by one thread (the trio thread that runs gossipsub's validators); ``now`` is passed in, so
the rules are tested with hand-picked times.
"""

from __future__ import annotations

import collections
from dataclasses import dataclass, field

from swarm_node.node.transport.ratelimit import Bucket

__all__ = ["CheckBudget", "AHEAD", "MAX_PUBLISHERS", "MAX_ROUNDS"]

MAX_PUBLISHERS = 4096  # publishers counted per round, and heartbeat stamps kept
MAX_ROUNDS = 16  # rounds whose counts are kept (the newest)
AHEAD = 8  # rounds past the newest polled one still checked


@dataclass
class CheckBudget:
    strangers_per_s: float = 20.0
    strangers_burst: float = 40.0
    per_round: int = 2
    heartbeat_gap_s: float = 0.5
    _strangers: Bucket | None = field(default=None, init=False)  # their shared share, from the first
    _rounds: dict = field(default_factory=dict, init=False)  # round -> Counter(publisher)
    _beats: collections.OrderedDict = field(default_factory=collections.OrderedDict, init=False)

    def body(self, publisher: str, round: int, vouched: bool, now: float, newest: int | None = None) -> str | None:
        """None if a body (or pointer) of ``publisher`` for ``round`` may be checked now, else the
        reason it is not. ``newest``: the newest round the node polled (None before its first poll)."""
        if newest is not None:
            if round > newest + AHEAD:
                return "wrong_round"
            for r in [r for r in self._rounds if r > newest + AHEAD]:  # counted before a clock was known
                del self._rounds[r]
        counts = self._rounds.get(round)
        if counts is None:
            counts = self._rounds[round] = collections.Counter()
            while len(self._rounds) > MAX_ROUNDS:
                del self._rounds[min(self._rounds)]
            if round not in self._rounds:  # older than every round kept: nothing to count it by
                return "outside_window"
        if counts[publisher] >= self.per_round:
            return "republished"
        if publisher not in counts and len(counts) >= MAX_PUBLISHERS and not vouched:
            return "strangers_over_budget"
        if not vouched and not self._take(now):
            return "strangers_over_budget"
        counts[publisher] += 1
        return None

    def heartbeat(self, publisher: str, vouched: bool, now: float, stamp: float = float("inf")) -> str | None:
        """None if a heartbeat of ``publisher`` signed at ``stamp`` may be checked now, else the
        reason it is not."""
        beat = self._beats.get(publisher)  # [charged at, charged before that, newest accepted stamp]
        if beat is not None and stamp <= beat[2]:
            return "heartbeat_replay"  # not newer than one already accepted: no check, no charge
        if beat is not None and now - beat[0] < self.heartbeat_gap_s:
            return "heartbeat_rate"
        if not vouched and not self._take(now):
            return "strangers_over_budget"
        if beat is None:
            beat = self._beats[publisher] = [-float("inf")] * 3
        beat[0], beat[1] = now, beat[0]
        self._beats.move_to_end(publisher)
        while len(self._beats) > MAX_PUBLISHERS:
            self._beats.popitem(last=False)
        return None

    def heartbeat_checked(self, publisher: str, stamp: float, ok: bool) -> None:
        """The full check's verdict on a heartbeat ``heartbeat`` let through: an accepted one's
        stamp is the newest, a refused one gives its gap back."""
        beat = self._beats.get(publisher)
        if beat is None:
            return
        if ok:
            beat[2] = max(beat[2], stamp)
        else:
            beat[0] = beat[1]

    def _take(self, now: float) -> bool:
        if self._strangers is None:
            self._strangers = Bucket.full(self.strangers_per_s, self.strangers_burst, now)
        return self._strangers.try_take(1.0, now)
