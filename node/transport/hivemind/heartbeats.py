"""Which heartbeats read from the hivemind DHT are news (pure, bounded).

Heartbeats live in the DHT itself (node/transport/hivemind/transport.py ``announce``), and a
writer's heartbeat sits at one or two levels of the index, refreshed at different times: an
older copy read from the other level is not news (the node's verifier would call it a replay).
So each publisher's last few heartbeats are remembered by digest, for at most
``MAX_PUBLISHERS`` publishers (keys are free: the least recently heard is forgotten).
"""

from __future__ import annotations

import collections
import hashlib
from dataclasses import dataclass, field

from swarm_node.node.transport.base import Delivery

__all__ = ["HeardHeartbeats", "MAX_PUBLISHERS"]

MAX_PUBLISHERS = 4096  # publishers whose last heartbeats are remembered
KEPT = 4  # digests remembered per publisher


@dataclass
class HeardHeartbeats:
    recent: collections.OrderedDict[str, tuple[bytes, ...]] = field(default_factory=collections.OrderedDict)

    def news(self, entries: dict[str, dict], me: str) -> list[Delivery]:
        """The heartbeats among ``entries`` (publisher -> heartbeat entry value, as read) not
        heard before, ``me``'s own left out, as deliveries of round -1."""
        out = []
        for publisher, value in entries.items():
            data = value.get("hb")
            if publisher == me or not isinstance(data, bytes):
                continue
            digest = hashlib.sha256(data).digest()
            recent = self.recent.get(publisher, ())
            if digest not in recent:
                self.recent[publisher] = (*recent[-(KEPT - 1):], digest)
                self.recent.move_to_end(publisher)
                if len(self.recent) > MAX_PUBLISHERS:
                    self.recent.popitem(last=False)
                out.append(Delivery(-1, publisher, data))
        return out

    def __len__(self) -> int:
        return len(self.recent)
