"""The node's link to its swarm: is the transport up, and bringing it back when it is not.

A p2p daemon can die under a running node (killed, out of memory, a crashed host library) and a
DHT can become unreachable. ``SwarmLink`` watches for it (the transport says it is dead, or
several polls in a row fail), then restarts the transport with exponential back-off (1 s doubling
to 30 s: node/transport/backoff.py) until it is back, while the node keeps training on its own
rollouts; publishing is skipped, not waited on, while it is down. Its state (``up``, ``down``, ``rejoining``), the number of outages and how long
the last one lasted go into ``status.json``, the metrics and the live tables.
"""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass, field

from swarm_node.node.transport.backoff import Backoff
from swarm_node.node.transport.base import Transport

log = logging.getLogger(__name__)

__all__ = ["SwarmLink"]

FAILED_POLLS_DOWN = 3  # consecutive failed polls that mean the swarm is unreachable


@dataclass
class SwarmLink:
    transport: Transport
    state: str = "up"  # up | down | rejoining
    outages: int = 0
    down_since: float | None = None
    last_outage_s: float | None = None
    rejoin_attempts: int = 0
    _failed_polls: int = field(default=0, repr=False)
    _next_try: float = field(default=0.0, repr=False)
    _waits: Backoff = field(default_factory=Backoff, repr=False)  # between rejoin attempts

    @property
    def up(self) -> bool:
        return self.state == "up"

    def poll_ok(self) -> None:
        self._failed_polls = 0

    def poll_failed(self, error: BaseException) -> None:
        self._failed_polls += 1
        if self.up and self._failed_polls == 1:  # once per outage, not four times a second
            log.warning("polling the swarm failed (%s: %s); watching the link", type(error).__name__, error)
        if self.up and self._failed_polls >= FAILED_POLLS_DOWN:
            self._went_down(f"{self._failed_polls} polls in a row failed")

    def check(self) -> None:
        """Notice a dead transport (its daemon exited) without waiting for polls to fail."""
        if self.up and not self.transport.alive():
            self._went_down("the transport's daemon exited")

    def _went_down(self, why: str) -> None:
        self.state = "down"
        self.outages += 1
        self.down_since = time.time()
        self._next_try = 0.0
        self._waits.reset()
        log.warning("lost the swarm (%s): training on local rollouts while rejoining", why)

    async def maybe_rejoin(self) -> bool:
        """If down and the back-off has passed, restart the transport once; True when up."""
        if self.up:
            return True
        if time.time() < self._next_try:
            return False
        self.state = "rejoining"
        self.rejoin_attempts += 1
        try:
            await self.transport.restart()
        except asyncio.CancelledError:
            raise
        except Exception as e:  # noqa: BLE001 - any failure: wait, then try again
            self.state = "down"
            wait = self._waits.next()
            self._next_try = time.time() + wait
            log.warning("rejoining the swarm failed (%s: %s); next try in %.0f s", type(e).__name__, e, wait)
            return False
        self.state = "up"
        self._failed_polls = 0
        self.last_outage_s = time.time() - (self.down_since or time.time())
        log.warning("rejoined the swarm after %.1f s", self.last_outage_s)
        return True

    def status(self) -> dict:
        return {"link": self.state, "outages": self.outages, "down_since": self.down_since,
                "last_outage_s": self.last_outage_s, "rejoin_attempts": self.rejoin_attempts}
