"""This node's clock offset from its swarm, read from peers' signed timestamps, and when to warn of it.

Rounds come from wall clocks (node/clock.py): a node whose clock is off by a good part of a round
publishes under rounds its peers are not reading yet (or no longer), so its envelopes are lost
without any error. Each signed heartbeat carries its signer's clock (the envelope's timestamp);
``signed_at - seen_at`` is that peer's clock minus ours, give or take how late the message was
seen, and the median over peers is the swarm's view of this node's clock: one peer with a wrong
clock moves it little. Positive: the peers' clocks are ahead (this clock is behind).

``seen_at`` is best taken as the middle of the interval in which the message first appeared (the
poll that found it and the one before): the estimate is then within half that interval (plus the
carrier's delay) of the truth, and ``uncertainty`` says so. ``swarm-node doctor`` samples for a
few seconds; a running node warns (``ClockWatch``) when the median is further from zero than
``SKEW_FRACTION`` of a round beyond what its sampling cannot tell apart, and again only once the
offset has changed by as much (``warn_again``): a warning that latched for good, as before, hid a
real skew that came after a false alarm.

Keys are free, so who is counted matters more than how: each peer is one vote (the median of its
own last few offsets), the doctor reports nothing from fewer than ``MIN_PEERS`` peers and calls a
median that most peers do not agree with no measurement (``agreeing``), and a running node counts
peers with standing (the exchange trained on their rollouts in 2 rounds: node/swarm/peer_work.py
``proven``) before any number of keys that only sent heartbeats, once ``MIN_PEERS`` have it (before,
one group taken once was standing and one such peer was enough: 2 keys with a group each and false
stamps made the median among 6 honest peers); else the peers it met first, so that a later flood
of fresh keys neither displaces them nor outvotes them (``ClockWatch``).
"""

from __future__ import annotations

import statistics
from collections import deque
from typing import Callable, Iterable, Mapping

__all__ = ["SKEW_FRACTION", "MIN_PEERS", "median_offset", "peer_offsets", "agreeing", "skew_exceeds", "skew_message",
           "warn_again", "ClockWatch"]

SKEW_FRACTION = 0.25  # of a round: a median offset beyond this (and the sampling's uncertainty) is warned of
DELIVERY_ALLOWANCE_S = 0.5  # what a carrier may add between a signature and the message being readable
SAMPLES_PER_PEER = 5  # a peer's offset is the median of its last few heartbeats
MIN_SAMPLES = 2  # ...counted once it has this many (one late delivery is not a clock)
MIN_PEERS = 3  # a doctor reports no offset from fewer distinct peers, a watch counts no fewer with standing: one or two keys are anyone's
NEW_PER_POLL = 16  # peers a watch starts tracking per heartbeat poll (those with standing always)
MET_ON_JOINING_ROUNDS = 1.5  # without standing, peers first heard within this of the longest-heard count (one heartbeat a round)
GONE_ROUNDS = 20.0  # a peer not heard for this long makes room first


def median_offset(stamps: Iterable[tuple[float, float]]) -> float | None:
    """The median of ``signed_at - seen_at`` over ``(signed_at, seen_at)`` pairs, one per peer
    (peer's clock minus this node's, seconds); None when there are none."""
    offsets = [signed - seen for signed, seen in stamps]
    return statistics.median(offsets) if offsets else None


def peer_offsets(stamps: Iterable[tuple[str, float, float]]) -> dict[str, float]:
    """Each peer's offset from ``(sender, signed_at, seen_at)`` samples: the median of its own
    last ``SAMPLES_PER_PEER`` (a peer that sends many heartbeats still has one vote)."""
    by_peer: dict[str, deque[float]] = {}
    for sender, signed, seen in stamps:
        by_peer.setdefault(sender, deque(maxlen=SAMPLES_PER_PEER)).append(signed - seen)
    return {p: statistics.median(o) for p, o in by_peer.items()}


def agreeing(offsets: Iterable[float], median: float, tolerance: float) -> int:
    """How many offsets lie within ``tolerance`` of ``median``: fewer than half means the peers'
    clocks disagree (some wrong, or forged), and their median says little about this clock."""
    return sum(abs(o - median) <= tolerance for o in offsets)


def skew_exceeds(offset: float, round_seconds: float, *, uncertainty: float = 0.0,
                 fraction: float = SKEW_FRACTION) -> bool:
    """Whether ``offset`` is further from zero than ``fraction`` of a round plus ``uncertainty``
    (what the sampling cannot tell from zero)."""
    return abs(offset) > fraction * round_seconds + uncertainty


def skew_message(offset: float, peers: int, round_seconds: float) -> str:
    """What a user reads when the offset is too big: which way, how much of a round, the fix."""
    side = "behind" if offset > 0 else "ahead of"
    return (f"this node's clock is {abs(offset):.2f} s {side} the median of {peers} peer(s)' signed timestamps, "
            f"{abs(offset) / round_seconds:.2f} of a round (swarm.round_seconds {round_seconds:g}): rounds come "
            f"from wall clocks, so its rollouts reach peers late or not at all. Synchronise the clock (NTP: "
            f"`timedatectl set-ntp true`, or chrony) and check with `swarm-node doctor`")


def warn_again(offset: float, warned_at: float | None, bound: float) -> tuple[bool, float | None]:
    """(whether to warn now, the offset last warned of) for a median ``offset``, ``warned_at`` the
    one last warned of (None: none since it was last back in line), ``bound`` the skew warned of.
    A warning stands until the offset is back within half the bound (so one hovering at the bound
    does not warn at every heartbeat) or has moved by a whole bound from what was said."""
    if warned_at is not None:
        if abs(offset) <= bound / 2:
            return False, None  # back in line: a later skew is reported again
        if abs(offset - warned_at) <= bound:
            return False, warned_at  # what was said still holds
    if abs(offset) <= bound:
        return False, warned_at
    return True, offset


class ClockWatch:
    """A running node's clock offset to its peers, fed one verified heartbeat at a time; says when
    it is too big (``warn_again``). Bounded: ``max_peers`` peers, ``SAMPLES_PER_PEER`` offsets each.

    Who counts (``counted``): the peers ``standing`` vouches for (the exchange passes "trained on
    in 2 rounds", work a fresh key has not done), when ``MIN_PEERS`` have been heard often enough; else
    the peers first heard within ``MET_ON_JOINING_ROUNDS`` rounds of the longest-heard one. Keys
    heard later are tracked but not counted, so a flood of fresh keys with false stamps cannot
    move the median; it cannot displace the peers already tracked either: a full table makes room
    by dropping a peer gone for ``GONE_ROUNDS`` rounds, else the newest peer without standing, and
    at most ``NEW_PER_POLL`` new peers are tracked per poll."""

    def __init__(self, round_seconds: float, *, uncertainty: float = 0.0, max_peers: int = 256,
                 fraction: float = SKEW_FRACTION, standing: Callable[[str], bool] | None = None,
                 new_per_poll: int = NEW_PER_POLL):
        self.round_seconds = round_seconds
        self.uncertainty = uncertainty
        self.fraction = fraction
        self.max_peers = max_peers
        self.new_per_poll = new_per_poll
        self.standing = standing or (lambda _peer: False)
        # insertion order is first-heard order: a peer keeps its place while it is tracked
        self._offsets: dict[str, deque[float]] = {}
        self._first: dict[str, float] = {}  # peer -> seen_at of its first tracked heartbeat
        self._last: dict[str, float] = {}  # peer -> seen_at of its latest
        self._new = 0  # peers started this poll
        self.untracked = 0  # heartbeats of new peers turned away (the per-poll cap, or a full table)
        self._last_poll: float | None = None
        self._window: tuple[float | None, float] = (None, 0.0)
        self.warned_at: float | None = None  # the offset last warned of, until it is back in line

    @property
    def warned(self) -> bool:
        return self.warned_at is not None

    def polled(self, at: float) -> None:
        """A poll for heartbeats began at ``at``: what it finds appeared since the previous one."""
        self._window, self._last_poll = (self._last_poll, at), at
        self._new = 0

    def heard_now(self, sender: str, signed_at: float) -> str | None:
        """``heard`` for a heartbeat the latest poll found, seen at the middle of the interval since
        the poll before (none before the second poll: the first finds heartbeats of any age)."""
        start, end = self._window
        return None if start is None else self.heard(sender, signed_at, (start + end) / 2)

    def peer_offsets(self) -> Mapping[str, float]:
        """Each peer's offset (median of its recent ones), for peers heard often enough."""
        return {p: statistics.median(d) for p, d in self._offsets.items() if len(d) >= MIN_SAMPLES}

    def counted(self) -> Mapping[str, float]:
        """The offsets the median is taken over (see the class)."""
        ready = self.peer_offsets()
        if ready:  # a peer gone for long no longer anchors the count
            latest = max(self._last.values()) - GONE_ROUNDS * self.round_seconds
            ready = {p: o for p, o in ready.items() if self._last[p] >= latest}
        vouched = {p: o for p, o in ready.items() if self.standing(p)}
        if len(vouched) >= MIN_PEERS or not ready:  # one or two vouched keys are not the swarm's clock
            return vouched
        since = min(self._first[p] for p in ready) + MET_ON_JOINING_ROUNDS * self.round_seconds
        return {p: o for p, o in ready.items() if self._first[p] < since}

    def offset(self) -> float | None:
        """The median over the counted peers of their offsets (None until one was heard often enough)."""
        return median_offset((o, 0.0) for o in self.counted().values())

    def heard(self, sender: str, signed_at: float, seen_at: float) -> str | None:
        """Record one verified heartbeat; the warning, when the offset exceeds the bound (again:
        ``warn_again``)."""
        if sender not in self._offsets and not self._track(sender, seen_at):
            self.untracked += 1
            return None
        self._offsets[sender].append(signed_at - seen_at)
        self._last[sender] = seen_at
        off = self.offset()
        if off is None:
            return None
        warn, self.warned_at = warn_again(off, self.warned_at, self.fraction * self.round_seconds + self.uncertainty)
        return skew_message(off, len(self.counted()), self.round_seconds) if warn else None

    def _track(self, sender: str, seen_at: float) -> bool:
        vouched = self.standing(sender)
        if not vouched and self._new >= self.new_per_poll:
            return False
        if len(self._offsets) >= self.max_peers:
            gone = min(self._offsets, key=self._last.__getitem__)
            if self._last[gone] < seen_at - GONE_ROUNDS * self.round_seconds:
                victim = gone
            else:  # the newest peer without standing: long-heard peers stay
                victim = next((p for p in reversed(self._offsets) if not self.standing(p)), None)
            if victim is None:
                return False
            del self._offsets[victim], self._first[victim], self._last[victim]
        self._new += not vouched
        self._offsets[sender] = deque(maxlen=SAMPLES_PER_PEER)
        self._first[sender] = seen_at
        return True
