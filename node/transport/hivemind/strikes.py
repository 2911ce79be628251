"""Whom a hivemind reader stops fetching from, and for how long (pure bookkeeping).

A body that fails verification (its sha256, its size, or the node's own checks: ``distrust``)
costs its publisher a strike: its entries are skipped for ``BACKOFF_ROUNDS`` rounds, doubling at
each new strike up to ``MAX_BACKOFF_ROUNDS`` (node/transport/backoff.py). Its entry was signed by
its key, so nobody can get an honest key backed off this way. The host that *served* the body is
struck the same way (keys are free, hosts are not: fresh keys pointing at the same bad host cost
nothing more); a host that refused a request or timed out is not (it may be an honest node that
junk entries point at). An admitted envelope (``vouch``) clears its publisher's strikes and its
hosts'. A host's own word on the one publisher it serves (``note_owner``) makes entries of other
keys pointing at it skipped (``misdirected``).
"""

from __future__ import annotations

import collections
from dataclasses import dataclass, field

from swarm_node.node.transport.backoff import backoff_delay

__all__ = ["Strikes", "SourceStrikes", "BACKOFF_ROUNDS", "MAX_BACKOFF_ROUNDS"]

BACKOFF_ROUNDS = 2  # a publisher whose body failed verification is skipped this many rounds (doubling)
MAX_BACKOFF_ROUNDS = 64
MAX_STRUCK = 4096  # strike counts kept per kind (keys are free: the oldest are forgotten, not memory)
MAX_OWNERS = 4096  # hosts whose word on whom they serve is remembered


@dataclass
class Strikes:
    """One kind of source (publishers, or hosts): strikes each, and the round it is skipped until."""

    counts: dict[str, int] = field(default_factory=dict)
    until: dict[str, int] = field(default_factory=dict)

    def strike(self, key: str, round: int) -> None:
        k = self.counts[key] = self.counts.get(key, 0) + 1
        if len(self.counts) > MAX_STRUCK:
            self.counts.pop(next(iter(self.counts)))
        self.until[key] = round + backoff_delay(BACKOFF_ROUNDS, k - 1, MAX_BACKOFF_ROUNDS)

    def skips(self, key: str, round: int) -> bool:
        return self.until.get(key, -1) >= round

    def forget_before(self, oldest: int) -> None:
        """Back-offs that ended before the oldest round still read are of no use."""
        self.until = {k: u for k, u in self.until.items() if u >= oldest}


@dataclass
class SourceStrikes:
    """Publishers and hosts struck, which host served each publisher's body of a round (the host
    a later verdict on that body is about), and each host's word on whom it serves."""

    publishers: Strikes = field(default_factory=Strikes)
    hosts: Strikes = field(default_factory=Strikes)
    served_by: dict[tuple[int, str], str] = field(default_factory=dict)  # (round, publisher) -> host
    owners: collections.OrderedDict[str, str] = field(default_factory=collections.OrderedDict)  # host -> publisher

    def strike(self, publisher: str, round: int, host: str | None = None) -> None:
        self.publishers.strike(publisher, round)
        if host is not None:
            self.hosts.strike(host, round)

    def skips(self, publisher: str, host: str, round: int) -> bool:
        """Whether an entry of ``publisher`` for ``round`` pointing at ``host`` is skipped: its
        publisher's or its host's last body failed verification."""
        return self.publishers.skips(publisher, round) or self.hosts.skips(host, round)

    def vouch(self, publisher: str) -> None:
        """An admitted envelope of ``publisher`` ends its strikes, and its hosts'."""
        self.publishers.counts.pop(publisher, None)
        for (_, p), host in self.served_by.items():
            if p == publisher:
                self.hosts.counts.pop(host, None)

    def note_owner(self, host: str, owner: str) -> None:
        self.owners.pop(host, None)
        self.owners[host] = owner
        if len(self.owners) > MAX_OWNERS:
            self.owners.popitem(last=False)

    def misdirected(self, publisher: str, host: str) -> bool:
        """Whether ``host`` said it serves another publisher than ``publisher``."""
        owner = self.owners.get(host)
        return owner is not None and owner != publisher

    def forget_before(self, oldest: int) -> None:
        self.publishers.forget_before(oldest)
        self.hosts.forget_before(oldest)
        self.served_by = {k: h for k, h in self.served_by.items() if k[0] >= oldest}
