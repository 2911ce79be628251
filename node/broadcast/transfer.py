"""What a node holds of each version (held or still arriving), and its broadcast counters.

The state serving (serve.py) and fetching (fetch.py) share: a ``Transfer`` is filled by the fetch
chunk by chunk, and served from as soon as each chunk is in (the pipelining).
"""

from __future__ import annotations

import asyncio
import collections
import time
from dataclasses import dataclass, field

from swarm_node.protocol.manifest import Manifest


@dataclass
class Transfer:
    """One version this node holds or is receiving."""

    manifest: Manifest
    chunks: dict[int, bytes] = field(default_factory=dict)
    arrived: dict[int, asyncio.Event] = field(default_factory=dict)
    done: asyncio.Event = field(default_factory=asyncio.Event)
    data: bytes | None = None  # the whole, once complete (the source's from the start)
    started: float = field(default_factory=time.monotonic)
    finished: float | None = None
    bytes_in: int = 0
    from_peer: collections.Counter = field(default_factory=collections.Counter)  # chunks each peer served us
    dropped: set = field(default_factory=set)  # peers dropped for this version
    abandoned: bool = False  # a newer version replaced it before it completed
    task: asyncio.Task | None = None

    def event(self, i: int) -> asyncio.Event:
        return self.arrived.setdefault(i, asyncio.Event())

    def chunk(self, i: int) -> bytes | memoryview | None:
        if self.data is not None:
            m = self.manifest
            return memoryview(self.data)[i * m.chunk_size:i * m.chunk_size + m.chunk_sizes[i]]
        return self.chunks.get(i)


@dataclass
class BroadcastStats:
    bad_chunks: collections.Counter = field(default_factory=collections.Counter)  # peer -> bad chunks served
    failed_requests: collections.Counter = field(default_factory=collections.Counter)  # peer -> errors, stalls
    fallbacks: int = 0  # chunks fetched from a node above the parent (it failed or lied)
    served_bytes: int = 0
    served_chunks: int = 0
    turned_away: int = 0  # requests refused for lack of a serve slot
    over_budget: int = 0  # manifest offers and asks refused past a request budget
    resumed_chunks: int = 0  # chunks found on disk at a restart
    versions_completed: int = 0
    versions_abandoned: int = 0  # versions given up midway: they fell out of the staleness bound
