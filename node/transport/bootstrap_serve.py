"""What every bootstrap peer does once it is up, whatever its carrier: publish its addresses
(printed as the join command, and to ``--maddr-file`` for scripts), log a health line every
``report_every`` seconds, and return on Ctrl-C or SIGTERM so its caller shuts the host down.

Imports neither hivemind nor py-libp2p (the two bootstraps, node/transport/hivemind/bootstrap.py and
node/transport/libp2p/bootstrap.py, each import one, and cannot share a process).
"""

from __future__ import annotations

import asyncio
import logging
import signal
from pathlib import Path
from typing import Callable

log = logging.getLogger(__name__)

__all__ = ["serve_until_stopped"]


async def serve_until_stopped(maddrs: list[str], *, what: str, join: str, maddr_file: Path | None,
                              report: Callable[[], str], report_every: float) -> None:
    """``what``: "bootstrap peer" or "libp2p bootstrap peer"; ``join``: the join command a node
    runs, to which each address is appended; ``report()``: the health line."""
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    try:
        if maddr_file is not None:
            tmp = maddr_file.with_suffix(".tmp")
            tmp.write_text("\n".join(maddrs) + "\n")
            tmp.replace(maddr_file)  # readers never see half a file
        print(f"{what} is up; nodes join with:", flush=True)
        for m in maddrs:
            print(f"  {join} {m}", flush=True)
        while not stop.is_set():
            try:
                await asyncio.wait_for(stop.wait(), timeout=report_every)
            except asyncio.TimeoutError:
                log.info("%s: %s", what, report())
    finally:
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.remove_signal_handler(sig)
