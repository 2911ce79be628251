"""In-memory transport: nodes of one process exchange envelopes through a shared ``MemoryHub``.

For unit tests and fast single-process simulation only; real swarms use a network transport.
It follows the same contract as the network transports (frame size limit, new-only polling,
records that expire) so code tested over it behaves the same over the network.
"""

from __future__ import annotations

import hashlib
import time
from dataclasses import dataclass, field
from typing import Iterable

from swarm_node.node.transport.base import MAX_ANNOUNCEMENT_SIZE, MAX_ENVELOPE_SIZE, Delivery, Transport

__all__ = ["MemoryHub", "MemoryTransport", "PROCESS_HUB"]


@dataclass
class MemoryHub:
    """What a DHT would hold: per swarm and round, each publisher's latest envelope."""

    # (swarm, round or "peers") -> {publisher: (bytes, expires_at)}
    records: dict = field(default_factory=dict)

    def put(self, swarm: str, round: int | str, publisher: str, data: bytes, expires_at: float) -> None:
        self.records.setdefault((swarm, round), {})[publisher] = (data, expires_at)

    def get(self, swarm: str, round: int | str, now: float) -> dict[str, bytes]:
        entries = self.records.get((swarm, round), {})
        return {p: d for p, (d, exp) in entries.items() if exp > now}

    def prune(self, now: float) -> None:
        for key in list(self.records):
            live = {p: v for p, v in self.records[key].items() if v[1] > now}
            if live:
                self.records[key] = live
            else:
                del self.records[key]


# Nodes created with transport "memory" and no explicit hub meet here: one swarm per process.
PROCESS_HUB = MemoryHub()


@dataclass
class MemoryTransport(Transport):
    hub: MemoryHub = field(default_factory=lambda: PROCESS_HUB)
    _seen: dict = field(default_factory=dict, init=False)  # round -> {(publisher, sha256)}
    _started: bool = field(default=False, init=False)
    _heard: dict = field(default_factory=dict, init=False)  # publisher -> sha256 of its last heartbeat

    async def start(self) -> None:
        self._started = True

    async def publish(self, round: int, data: bytes, expires_in: float) -> None:
        if len(data) > MAX_ENVELOPE_SIZE:
            raise ValueError(f"envelope of {len(data)} bytes is over the {MAX_ENVELOPE_SIZE}-byte limit")
        now = time.time()
        self.hub.prune(now)
        self.hub.put(self.swarm, round, self.publisher, bytes(data), now + expires_in)

    async def publish_as(self, publisher: str, round: int, data: bytes, expires_in: float) -> None:
        self.hub.put(self.swarm, round, publisher, bytes(data), time.time() + expires_in)

    async def poll(self, rounds: Iterable[int], want: int | None = None,
                   max_size: int | None = None) -> list[Delivery]:
        limit = MAX_ENVELOPE_SIZE if max_size is None else min(max_size, MAX_ENVELOPE_SIZE)
        out = []
        now = time.time()
        rounds = list(rounds)
        for old in [r for r in self._seen if rounds and r < min(rounds)]:
            del self._seen[old]  # bounded memory: rounds outside the window are never polled again
        for r in rounds:
            seen = self._seen.setdefault(r, set())
            for publisher, data in self.hub.get(self.swarm, r, now).items():
                if publisher == self.publisher:
                    continue
                key = (publisher, hashlib.sha256(data).digest())
                if key in seen:
                    continue
                seen.add(key)
                # Enforced on receipt too: a hub is shared, and anyone can write to it.
                if len(data) > limit:
                    self.rejected["oversized"] += 1
                    continue
                out.append(Delivery(r, publisher, data))
        return out

    async def announce(self, data: bytes, expires_in: float) -> None:
        self.hub.put(self.swarm, "peers", self.publisher, bytes(data), time.time() + expires_in)

    async def poll_announcements(self) -> list[Delivery]:
        out = []
        current = self.hub.get(self.swarm, "peers", time.time())
        self._heard = {p: h for p, h in self._heard.items() if p in current}
        for publisher, data in current.items():
            digest = hashlib.sha256(data).digest()
            if publisher == self.publisher or self._heard.get(publisher) == digest:
                continue
            self._heard[publisher] = digest
            if len(data) > MAX_ANNOUNCEMENT_SIZE:
                self.rejected["oversized"] += 1
                continue
            out.append(Delivery(-1, publisher, data))
        return out

    async def close(self) -> None:
        self._started = False

    def info(self) -> dict:
        return {"transport": "memory", "found_via": "hub"}  # the process's in-memory hub: no join to speak of

    def buffer_sizes(self) -> dict[str, int]:
        return {"seen_rounds": len(self._seen), "seen": sum(len(v) for v in self._seen.values()),
                "heard": len(self._heard), "hub_keys": len(self.hub.records),
                "hub_entries": sum(len(v) for v in self.hub.records.values())}
