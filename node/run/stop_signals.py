"""Ctrl-C and SIGTERM while a node runs: each asks it to stop, for the node's whole life.

The handlers go on when the round loop starts and come off only when the node has closed: its
last step, the final checkpoint, the summary and plots, and leaving the swarm. A second Ctrl-C in
that time is another request (the node says it is already stopping), never Python's
``KeyboardInterrupt``, which ended the process mid-summary and left status.json at "stopping"
(docs/run-folder.md: a second Ctrl-C does not hurry the stop; ``kill -9`` does).
"""

from __future__ import annotations

import asyncio
import signal
from typing import Callable

__all__ = ["StopSignals"]

SIGNALS = (signal.SIGINT, signal.SIGTERM)


class StopSignals:
    """SIGINT and SIGTERM call ``on_signal`` on ``loop`` until ``release``."""

    def __init__(self, loop: asyncio.AbstractEventLoop, on_signal: Callable[[], None]):
        self.loop, self.installed = loop, []
        for sig in SIGNALS:
            try:
                loop.add_signal_handler(sig, on_signal)
            except (NotImplementedError, RuntimeError):  # not the main thread / not POSIX
                continue
            self.installed.append(sig)

    def release(self) -> None:
        for sig in self.installed:
            try:
                self.loop.remove_signal_handler(sig)
            except (NotImplementedError, RuntimeError):  # the loop is already closed
                pass
        self.installed = []
