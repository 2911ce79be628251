"""A stop request that the node's waits give way to.

Ctrl-C or SIGTERM stops a node after its current step, but a step can wait a long time: for the
next round of the shared clock (up to ``swarm.round_seconds``) and for peers' groups (up to
``swarm.collect_seconds``). Those waits end at once on a stop: the node does not start a new
step, or it learns from the peer groups it already has, then checkpoints and exits.
"""

from __future__ import annotations

import asyncio
from typing import Awaitable

__all__ = ["StopRequest"]


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
