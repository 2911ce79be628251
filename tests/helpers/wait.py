"""Waiting on a condition, never on a sleep: the one way tests wait (a loaded 2-core machine makes
every fixed sleep wrong sooner or later)."""

from __future__ import annotations

import asyncio
import subprocess
import time
from typing import Callable


def wait_until(cond: Callable[[], object], timeout: float, what: str,
               proc: subprocess.Popen | None = None, poll: float = 0.2) -> None:
    """Poll ``cond`` until it is true; fail naming ``what`` after ``timeout`` s, or at once if
    ``proc`` exits first (its exit code in the message)."""
    deadline = time.monotonic() + timeout
    while not cond():
        if proc is not None and proc.poll() is not None:
            raise AssertionError(f"process exited (rc {proc.returncode}) while waiting for {what}")
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what}")
        time.sleep(poll)


async def wait_for(cond: Callable[[], object], timeout: float = 60.0, poll: float = 0.02) -> None:
    """The same inside an event loop: ``cond`` is checked between the loop's other work."""
    async def loop():
        while not cond():
            await asyncio.sleep(poll)
    await asyncio.wait_for(loop(), timeout)
