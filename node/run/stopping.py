"""A stop request that the node's waits give way to.

Ctrl-C or SIGTERM stops a node after its current step, but a step can wait a long time: for the
next round of the shared clock (up to ``swarm.round_seconds``) and for peers' groups (up to
``swarm.collect_seconds``). Those waits end at once on a stop: the node does not start a new
step, or it learns from the peer groups it already has, then checkpoints and exits. Closing is
bounded too (``close_within``): no part of it may keep a stopped node's process alive.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Awaitable

__all__ = ["StopRequest", "close_within", "CLOSE_PART_S"]

log = logging.getLogger("swarm_node.node.run.trainer")


class StopRequest:
    """Set once (``request``); ``unless_requested`` runs a wait that a request cuts short."""

    def __init__(self) -> None:
        self._event = asyncio.Event()  # bound to the loop that first waits on it

    def request(self) -> None:
        """Called on the node's event loop (its signal handler, or the host running several nodes)."""
        self._event.set()

    def __bool__(self) -> bool:
        return self._event.is_set()

    async def unless_requested(self, wait: Awaitable) -> bool:
        """Await ``wait``; if a stop is requested first, cancel it. True when it finished."""
        if self._event.is_set():
            if asyncio.iscoroutine(wait):
                wait.close()  # never started: no "never awaited" warning
            return False
        task = asyncio.ensure_future(wait)
        stop = asyncio.ensure_future(self._event.wait())
        try:
            await asyncio.wait({task, stop}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for t in (task, stop):
                t.cancel()
        if task.done() and not task.cancelled():
            task.result()  # the wait's own error, if it raised
            return True
        return False


CLOSE_PART_S = 15.0  # the longest one part of a node's close may take before the node goes on without it


async def close_within(what: str, coro: Awaitable, seconds: float = CLOSE_PART_S) -> bool:
    """Run one part of a node's close (its role, its swarm), but never wait on it past ``seconds``:
    a stop must end the process. A part that has not finished by then is cancelled and left, said in
    the log by name (a close that waits for a broker's answer that never comes once hung a worker
    after its last step). True when it finished in time; its own error is raised."""
    task = asyncio.ensure_future(coro)
    done, _ = await asyncio.wait({task}, timeout=seconds)
    if not done:
        task.cancel()
        log.warning("closing %s took over %.0f s: left behind so the node can stop", what, seconds)
        return False
    task.result()
    return True
