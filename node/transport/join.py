"""How a carrier that joins through peers (hivemind, libp2p) finds its swarm: the configured
bootstraps, then the peers this node verified before (its peer cache, node/swarm/peer_cache.py,
handed in as ``fallback``), with one back-off between attempts; and which path found it.

The one decision, for every such carrier (each supplies only ``attempt``, its way of dialling a
list of addresses):

- no bootstrap configured: a new swarm (``NEW_SWARM``), the cache unread (a node started alone
  means to start one);
- bootstraps and no cached address: the carrier's own join, with its retries and its message
  (``BOOTSTRAP``);
- bootstraps and a cache: each attempt tries the bootstraps, then the cached addresses (at most 2 a
  peer, each one that parses and names a ``/p2p/`` peer: the cache's ``addrs`` decides), with the
  usual back-off between attempts, so a bootstrap slow to come up is tried again and a stale cache
  does not end the join early (``BOOTSTRAP`` or ``PEER_CACHE``, whichever answered).

What found the swarm is the carrier's ``found_via``, which ``status.json``, the live status line
and the simulator's live table show.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Awaitable, Callable, Optional, TypeVar

from swarm_node.node.transport.base import TransportError

log = logging.getLogger(__name__)

__all__ = ["join_swarm", "BOOTSTRAP", "PEER_CACHE", "NEW_SWARM", "MAX_DELAY_S"]

BOOTSTRAP, PEER_CACHE, NEW_SWARM = "bootstrap", "peer cache", "new swarm"
MAX_DELAY_S = 30.0

T = TypeVar("T")
# attempt(addresses, retries) -> what joined (the carrier's); raises TransportError when none answered
Attempt = Callable[[list, int], Awaitable[T]]


async def join_swarm(attempt: Attempt, bootstraps: list[str], fallback: Optional[Callable[[], list[str]]],
                     retries: int, backoff: float, on_retry: Optional[Callable[[str], None]] = None
                     ) -> tuple[T, str]:
    """Join through ``bootstraps``, then ``fallback()``'s cached addresses; returns what
    ``attempt`` returned and which path answered (``BOOTSTRAP``, ``PEER_CACHE``, ``NEW_SWARM``)."""
    if not bootstraps:
        return await attempt([], retries), NEW_SWARM
    cached = [a for a in (fallback() if fallback is not None else []) if a not in bootstraps]
    if not cached:
        return await attempt(bootstraps, retries), BOOTSTRAP
    failed = ""
    for n in range(retries + 1):
        for addrs, via in ((bootstraps, BOOTSTRAP), (cached, PEER_CACHE)):
            try:
                joined = await attempt(addrs, 0)
            except TransportError as e:
                failed = str(e) if via == BOOTSTRAP else f"{failed}; {len(cached)} cached peer address(es): {e}"
                continue
            if via == PEER_CACHE:
                log.warning("no bootstrap answered; found the swarm through %d cached address(es) of peers this "
                            "node verified before", len(cached))
            return joined, via
        if n < retries:
            delay = min(MAX_DELAY_S, backoff * 2 ** n)
            log.warning("no bootstrap and none of %d cached peer address(es) answered (attempt %d/%d); "
                        "retrying in %.0f s", len(cached), n + 1, retries + 1, delay)
            if on_retry is not None:
                on_retry(f"attempt {n + 1}/{retries + 1}: no bootstrap or cached peer answered")
            await asyncio.sleep(delay)
    raise TransportError(f"{failed} (tried {retries + 1} time(s), the bootstraps then the cache)")
