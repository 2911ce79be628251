"""Where a hivemind reader looks for the publishers it knows (pure bookkeeping; the transport reads).

A writer stores its entry at the levels its own swarm-size estimate picks, a reader reads the
level its estimate picks (node/transport/hivemind/index.py); two nodes whose estimates drifted
more than two-fold apart (one of them fooled, or just new) would read past each other's entries
for good. So a reader looks for a known publisher at its own level first; when it is not there,
a later read searches every level for it: the one it was missed at, then the others, lower ones
first (``search_levels``), and the level it turns up at nearest the reader's is where the reader
reads it from then on, until the reader's own level changes (then its own level is tried again:
most publishers are there, and a lower shard costs more bytes).

Most publishers missing from a shard are not lost, only not publishing: the round is the newest
and they have not written into it yet (the transport judges absence only in rounds before the
newest), or they skipped a round, or left. A search reads a shard of every level, so it is
bounded: at most MAX_SEARCHES publishers are searched a round, chosen at random among those due
(``searches``), and one a search did not find is searched again only after a back-off of 2, 4
rounds; after MAX_FAILED_SEARCHES searches found it nowhere it is *gone*: made missing again once
it turns up in a shard read (any shard, any level: the reader still reads where it was last
seen), else searched once more every GONE_RETRY_ROUNDS rounds (at most one a round, only with a
search left over): Sybil DHT nodes near its shard keys could withhold it through three searches,
and random reads alone would find it about one read in 40. Before, a publisher stayed missing for good (back-off up to
32 rounds, the longest missing searched first): 64 known keys gone silent took both searches of
every round, and an honest peer that went missing after them waited 200-odd rounds or more.
"""

from __future__ import annotations

import collections
import dataclasses
import random
from dataclasses import dataclass
from typing import Collection, Iterable, Mapping

from swarm_node.node.transport.hivemind.index import search_levels

__all__ = ["KnownShards", "Missing", "MAX_REMEMBERED", "MAX_SEARCHES", "MAX_BACKOFF_ROUNDS", "MAX_FAILED_SEARCHES",
           "GONE_RETRY_ROUNDS", "backoff_rounds"]

MAX_REMEMBERED = 4096  # publishers whose level is remembered (as many as the fetcher knows)
MAX_SEARCHES = 2  # missing publishers searched for a round (a search reads a shard of every level)
MAX_BACKOFF_ROUNDS = 32  # the longest wait before a publisher no search found is searched again
MAX_FAILED_SEARCHES = 3  # searches that found a publisher nowhere before it is taken for gone
GONE_RETRY_ROUNDS = 64  # a gone publisher is searched once more after this many rounds


def backoff_rounds(failed: int) -> int:
    """Rounds to wait before searching again for a publisher ``failed`` searches did not find."""
    return min(2 ** failed, MAX_BACKOFF_ROUNDS) if failed > 0 else 0


@dataclass(frozen=True)
class Missing:
    level: int  # where it was missed
    failed: int = 0  # searches that did not find it since
    not_before: int = 0  # the first round it may be searched for again


class KnownShards:
    """Per known publisher found away from the reader's level: that level; and who is missing."""

    def __init__(self, limit: int = MAX_REMEMBERED, max_searches: int = MAX_SEARCHES,
                 rng: random.Random | None = None):
        self.limit = limit
        self.max_searches = max_searches
        self.rng = rng or random.Random()
        # searched for in vain: publisher -> (the level it was missed at, the round it was given up), LRU
        self.gone: collections.OrderedDict[str, tuple[int, int]] = collections.OrderedDict()
        # publisher -> (the level it was found at, the reader's level then), LRU
        self.found_at: collections.OrderedDict[str, tuple[int, int]] = collections.OrderedDict()
        self.missing: collections.OrderedDict[str, Missing] = collections.OrderedDict()
        self._spent: tuple[int, int] = (-1, 0)  # (round, searches chosen in it)

    def searches(self, candidates: Collection[str], round: int, most: int | None = None) -> list[str]:
        """The missing publishers among ``candidates`` to search for now, in ``round``: those whose
        back-off is over, chosen at random (whoever is missing longest cannot keep the searches
        from a peer missing since), at most ``max_searches`` a round all calls together (and
        ``most`` this call), none twice a round; the ones returned are counted as searched."""
        spent = self._spent[1] if self._spent[0] == round else 0
        room = max(min(self.max_searches - spent, self.max_searches if most is None else most), 0)
        due = [p for p, m in self.missing.items() if p in candidates and m.not_before <= round]
        out = self.rng.sample(due, min(room, len(due)))
        if len(out) < room:  # a search left over: one gone publisher, given up long enough ago
            again = [p for p, (_lv, since) in self.gone.items() if p in candidates and round - since >= GONE_RETRY_ROUNDS]
            if again:
                p = self.rng.choice(again)
                level, _since = self.gone.pop(p)
                self.missing[p] = Missing(level, MAX_FAILED_SEARCHES - 1)  # one more search in vain: gone again
                out.append(p)
        self._spent = (round, spent + len(out))
        for p in out:  # once a round (``observe`` moves it on)
            self.missing[p] = dataclasses.replace(self.missing[p], not_before=round + 1)
        return out

    def levels(self, publisher: str, reader_level: int, search: bool = False) -> list[int]:
        """The levels to read ``publisher``'s shard at: every level when it is ``search``ed (the
        one it was missed at first: it may have only skipped a round); else where it was found
        away from the reader's level (while that level is unchanged), else the reader's own."""
        if search and publisher in self.missing:
            missed = self.missing[publisher].level
            return [missed] + search_levels(missed)
        level, then = self.found_at.get(publisher, (reader_level, reader_level))
        return [level if then == reader_level else reader_level]

    def plan(self, publishers: Iterable[str], reader_level: int, searched: Collection[str] = ()) -> dict[str, list[int]]:
        return {p: self.levels(p, reader_level, p in searched) for p in publishers}

    def observe(self, looked: Mapping[str, Iterable[int]], found: Mapping[str, set[int]], reader_level: int,
                round: int = 0, searched: Collection[str] = ()) -> None:
        """After a read in ``round``: ``looked`` = the levels each favoured publisher's shard was
        read at (in rounds whose absence counts), ``found`` = the levels of the shards it turned
        up in (any shard read, of any round; a gone publisher found there is missing again when
        next not found), ``searched`` = those of them searched for."""
        for p in [p for p in found if p in self.gone]:
            del self.gone[p]
        for p, levels in looked.items():
            at = found.get(p)
            if at:
                self.missing.pop(p, None)
                if reader_level in at:  # where the reader looks anyway: nothing to remember
                    self.found_at.pop(p, None)
                    continue
                self.found_at[p] = (min(at, key=lambda lv: (abs(lv - reader_level), lv)), reader_level)
                self.found_at.move_to_end(p)
                if len(self.found_at) > self.limit:
                    self.found_at.popitem(last=False)
            elif p in searched and p in self.missing:  # every level, and nowhere: back off
                m = self.missing[p]
                if m.failed + 1 >= MAX_FAILED_SEARCHES:  # gone (or silent): searched again only after GONE_RETRY_ROUNDS
                    del self.missing[p]
                    self.gone[p] = (m.level, round)
                    self.gone.move_to_end(p)
                    if len(self.gone) > self.limit:
                        self.gone.popitem(last=False)
                    continue
                self.missing[p] = Missing(m.level, m.failed + 1, round + backoff_rounds(m.failed + 1))
            elif p not in self.missing and p not in self.gone:
                levels = list(levels)
                self.missing[p] = Missing(levels[0] if levels else reader_level)
                if len(self.missing) > self.limit:
                    self.missing.popitem(last=False)
