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
few seconds; a running node warns once (``ClockWatch``) when the median is further from zero than
``SKEW_FRACTION`` of a round beyond what its sampling cannot tell apart.
"""

from __future__ import annotations

import statistics
from collections import deque
from typing import Iterable, Mapping

__all__ = ["SKEW_FRACTION", "median_offset", "peer_offsets", "skew_exceeds", "skew_message", "ClockWatch"]

SKEW_FRACTION = 0.25  # of a round: a median offset beyond this (and the sampling's uncertainty) is warned of
DELIVERY_ALLOWANCE_S = 0.5  # what a carrier may add between a signature and the message being readable
SAMPLES_PER_PEER = 5  # a peer's offset is the median of its last few heartbeats
MIN_SAMPLES = 2  # ...counted once it has this many (one late delivery is not a clock)


def median_offset(stamps: Iterable[tuple[float, float]]) -> float | None:
    """The median of ``signed_at - seen_at`` over ``(signed_at, seen_at)`` pairs, one per peer
    (peer's clock minus this node's, seconds); None when there are none."""
    offsets = [signed - seen for signed, seen in stamps]
    return statistics.median(offsets) if offsets else None


def peer_offsets(stamps: Iterable[tuple[str, float, float]]) -> dict[str, float]:
    """Each peer's offset from ``(sender, signed_at, seen_at)`` samples: the median of its own."""
    by_peer: dict[str, list[float]] = {}
    for sender, signed, seen in stamps:
        by_peer.setdefault(sender, []).append(signed - seen)
    return {p: statistics.median(o) for p, o in by_peer.items()}


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


class ClockWatch:
    """A running node's clock offset to its peers, fed one verified heartbeat at a time; says once
    when it is too big. Bounded: ``max_peers`` peers, ``SAMPLES_PER_PEER`` offsets each."""

    def __init__(self, round_seconds: float, *, uncertainty: float = 0.0, max_peers: int = 256,
                 fraction: float = SKEW_FRACTION):
        self.round_seconds = round_seconds
        self.uncertainty = uncertainty
        self.fraction = fraction
        self.max_peers = max_peers
        self._offsets: dict[str, deque[float]] = {}
        self._last_poll: float | None = None
        self._window: tuple[float | None, float] = (None, 0.0)
        self.warned = False

    def polled(self, at: float) -> None:
        """A poll for heartbeats began at ``at``: what it finds appeared since the previous one."""
        self._window, self._last_poll = (self._last_poll, at), at

    def heard_now(self, sender: str, signed_at: float) -> str | None:
        """``heard`` for a heartbeat the latest poll found, seen at the middle of the interval since
        the poll before (none before the second poll: the first finds heartbeats of any age)."""
        start, end = self._window
        return None if start is None else self.heard(sender, signed_at, (start + end) / 2)

    def peer_offsets(self) -> Mapping[str, float]:
        """Each peer's offset (median of its recent ones), for peers heard often enough."""
        return {p: statistics.median(d) for p, d in self._offsets.items() if len(d) >= MIN_SAMPLES}

    def offset(self) -> float | None:
        """The median over peers of their offsets (None until one peer was heard often enough)."""
        return median_offset((o, 0.0) for o in self.peer_offsets().values())

    def heard(self, sender: str, signed_at: float, seen_at: float) -> str | None:
        """Record one verified heartbeat; the warning, the first time the offset exceeds the bound."""
        if sender not in self._offsets and len(self._offsets) >= self.max_peers:
            del self._offsets[next(iter(self._offsets))]  # the peer first heard of makes room
        self._offsets.setdefault(sender, deque(maxlen=SAMPLES_PER_PEER)).append(signed_at - seen_at)
        if self.warned:
            return None
        off = self.offset()
        if off is None or not skew_exceeds(off, self.round_seconds, uncertainty=self.uncertainty,
                                           fraction=self.fraction):
            return None
        self.warned = True
        return skew_message(off, len(self.peer_offsets()), self.round_seconds)
