"""Where a hivemind reader looks for the publishers it knows (pure bookkeeping; the transport reads).

A writer stores its entry at the levels its own swarm-size estimate picks, a reader reads the
level its estimate picks (node/transport/hivemind/index.py); two nodes whose estimates drifted
more than two-fold apart (one of them fooled, or just new) would read past each other's entries
for good. So a reader looks for a known publisher at its own level first; when it is not there,
the next read looks at every other level, lower ones first (``search_levels``), and the level it
turns up at is where the reader reads it from then on, until the reader's own level changes (then
its own level is tried again: most publishers are there, and a lower shard costs more bytes).
Once a search finds nothing either it is looked for where it was last seen again (it may have
left, or not published into the round yet).
"""

from __future__ import annotations

import collections
from typing import Iterable, Mapping

from node.transport.hivemind.index import search_levels

__all__ = ["KnownShards", "MAX_REMEMBERED"]

MAX_REMEMBERED = 4096  # publishers whose level is remembered (as many as the fetcher knows)


class KnownShards:
    """Per known publisher found away from the reader's level: that level; and who is being searched for."""

    def __init__(self, limit: int = MAX_REMEMBERED):
        self.limit = limit
        # publisher -> (the level it was found at, the reader's level then), LRU
        self.found_at: collections.OrderedDict[str, tuple[int, int]] = collections.OrderedDict()
        self.missing: dict[str, int] = {}  # publisher -> the level it was missed at

    def levels(self, publisher: str, reader_level: int) -> list[int]:
        """The levels to read ``publisher``'s shard at: every level but the one it was missed at
        while it is missing; else where it was found away from the reader's level (while that
        level is unchanged), else the reader's own."""
        if publisher in self.missing:
            return search_levels(self.missing[publisher])
        level, then = self.found_at.get(publisher, (reader_level, reader_level))
        return [level if then == reader_level else reader_level]

    def plan(self, publishers: Iterable[str], reader_level: int) -> dict[str, list[int]]:
        return {p: self.levels(p, reader_level) for p in publishers}

    def observe(self, looked: Mapping[str, Iterable[int]], found: Mapping[str, set[int]],
                reader_level: int) -> None:
        """After a read: ``looked`` = the levels each favoured publisher's shard was read at,
        ``found`` = the levels of the shards it turned up in (any shard read, of any round)."""
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
            elif p in self.missing:  # searched every level: gone, or not published yet
                del self.missing[p]  # back to where it was last found (or the reader's level)
            else:
                levels = list(levels)
                self.missing[p] = levels[0] if levels else reader_level
                if len(self.missing) > self.limit:
                    del self.missing[next(iter(self.missing))]
