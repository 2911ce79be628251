"""What a hivemind reader spends fetching envelopes, round by round, and what it has judged
(pure bookkeeping; the transport does the I/O).

A body costs a stream and up to 4 MiB, and keys are free, so a node fetches about what it will
use (``poll``'s ``want``; node/transport/hivemind/index.py ``choose_fetches``): each round,
``want`` bodies of publishers with a verified history, and ``explore_allowance`` unknown ones on
top. A round that has both is not read again; the newest two are re-read as entries arrive (four
times a round), older ones once a round. A failed fetch of a known publisher gives its slot back
and is retried on the next polls, up to ``MAX_FETCH_FAILURES``; an unknown one's slot is spent
whatever it brought. Every entry judged (fetched, refused, given up) is remembered with its
round, so it is never fetched twice, and forgotten with the round.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from swarm_node.node.transport.hivemind.index import explore_allowance

__all__ = ["RoundBudget", "FetchBudget", "MAX_FETCH_FAILURES"]

MAX_FETCH_FAILURES = 3  # give up on an index entry whose publisher does not answer this often

Entry = tuple[str, str]  # (publisher, sha256 its index entry announced)


@dataclass
class RoundBudget:
    """What a node has spent on one round's envelopes."""

    known: int = 0  # fetches of publishers with a verified history (a failed one is given back)
    explored: int = 0  # fetches of unknown publishers, whatever they brought
    last_read: float = float("-inf")
    tried: set[str] = field(default_factory=set)


@dataclass
class FetchBudget:
    rounds: dict[int, RoundBudget] = field(default_factory=dict)
    judged: dict[int, set[Entry]] = field(default_factory=dict)  # round -> entries fetched or refused
    failures: dict[tuple[int, str, str], int] = field(default_factory=dict)  # (round, *entry) -> failed fetches

    def forget_before(self, oldest: int) -> None:
        for old in [r for r in self.judged if r < oldest]:
            del self.judged[old]
        self.failures = {k: v for k, v in self.failures.items() if k[0] >= oldest}
        self.rounds = {r: b for r, b in self.rounds.items() if r >= oldest}

    def due(self, rounds: list[int], want: int | None, known: int, now: float, round_seconds: float) -> list[int]:
        """The rounds whose index shards to read now (``known``: publishers with a verified
        history); marks them read at ``now``. ``want`` None: every round, every time."""
        newest = max(rounds, default=0)
        due = []
        for r in rounds:
            b = self.rounds.setdefault(r, RoundBudget())
            if want is not None and b.known >= want and b.explored >= explore_allowance(r, known, want):
                continue  # this round has what it needs
            # The newest two rounds are re-read as entries arrive; older ones once a round.
            every = round_seconds / 4 if r >= newest - 1 else round_seconds
            if want is None or now - b.last_read >= every:
                b.last_read = now
                due.append(r)
        return due

    def reading(self, round: int) -> RoundBudget:
        """The budget of a round whose shards were just read (its judged set opened)."""
        self.judged.setdefault(round, set())
        return self.rounds[round]

    def slots(self, round: int, want: int, known: int) -> tuple[int, int]:
        """(fetches of known publishers, of unknown ones) ``round`` may still start."""
        b = self.rounds[round]
        return want - b.known, explore_allowance(round, known, want) - b.explored

    def spend(self, round: int, publisher: str, known: bool) -> None:
        b = self.rounds[round]
        if known:
            b.known += 1
        else:
            b.explored += 1  # spent whatever the fetch brings
        b.tried.add(publisher)

    def is_judged(self, round: int, entry: Entry) -> bool:
        return entry in self.judged.get(round, ())

    def judge(self, round: int, entry: Entry) -> None:
        self.judged.setdefault(round, set()).add(entry)

    def failed(self, round: int, entry: Entry) -> int:
        """Count one more failed fetch of ``entry``; returns how many so far."""
        n = self.failures[(round, *entry)] = self.failures.get((round, *entry), 0) + 1
        return n

    def fetch_failed(self, round: int, publisher: str, entry: Entry, retry: bool, known: bool) -> bool | None:
        """Book a fetch that brought nothing usable. None: nothing more to do (already judged, or
        a publisher with a verified history, ``retry``, gets its slot back to be tried again, up
        to MAX_FETCH_FAILURES times). Else the entry is given up for the round: True when that
        counts as a fetch failure (tries used up, or an unknown key's one try)."""
        b = self.rounds.get(round)
        n = self.failures.get((round, *entry), 0)
        if self.is_judged(round, entry):
            return None  # already judged (oversized): backed off there
        if retry and 0 < n < MAX_FETCH_FAILURES and b is not None:
            if known and b.known > 0:
                b.known -= 1
            b.tried.discard(publisher)
            return None
        self.judge(round, entry)
        return n >= MAX_FETCH_FAILURES or not retry
