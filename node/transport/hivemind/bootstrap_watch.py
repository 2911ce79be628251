"""Keeping the bootstrap peers introduced: a restarted bootstrap learns the swarm again.

A bootstrap peer that restarts (same key, same address) comes back with an empty routing table.
Nodes that were in the swarm while it was away have dropped it from theirs (their requests to it
failed), so nothing tells it about them, and every node that joins through it afterwards joins it
alone: a second swarm beside the first (the hour's soak found this: docs/results/soak.md). The
py-libp2p carrier dials its bootstraps again whenever none is connected
(node/transport/libp2p/peer_exchange.py); this is the same rule for hivemind's DHT.

Every ``period`` seconds (jittered) the node looks for each configured bootstrap in its routing
table. One that is there gets this node's requests as part of the DHT's own traffic, and a request
introduces the sender, so nothing is done. One that is missing is dialled and pinged, which adds
this node to its routing table (hivemind's ``rpc_ping``); a missing bootstrap is tried again after
a back-off (``period`` doubling to ``MAX_WAIT_S``) until it is back in the table, so a bootstrap
that stays away, or one this node's full bucket cannot keep, costs one small ping per node every
few minutes at most.

``due`` is the decision (pure, tested with a hand-made clock); ``BootstrapWatch.run`` is the
transport's owned task that acts on it.
"""

from __future__ import annotations

import asyncio
import logging
import random
from dataclasses import dataclass, field
from typing import Callable

from swarm_node.node.transport.addresses import peer_id_of, relayed
from swarm_node.node.transport.backoff import Backoff

log = logging.getLogger("swarm_node.node.transport.hivemind.transport")  # the transport's log name

__all__ = ["BootstrapWatch", "PERIOD_S", "MAX_WAIT_S", "DIAL_TIMEOUT_S", "log_if_failed"]

PERIOD_S = 30.0  # how often the routing table is looked at; the first wait after a miss
MAX_WAIT_S = 300.0  # the longest wait between pings of a bootstrap that stays missing
DIAL_TIMEOUT_S = 10.0
JITTER = 0.2  # +-20%: nodes that lost a bootstrap together do not all ping it in the same second


@dataclass
class _Missing:
    backoff: Backoff
    next_try: float  # when to ping again (the clock ``due`` is given)
    said: bool = False  # whether this absence was already logged


@dataclass
class BootstrapWatch:
    """Which bootstraps to ping, and pinging them. ``bootstraps`` are the configured addresses
    (``/.../p2p/<id>``); several addresses of one peer are one bootstrap."""

    bootstraps: list[str]
    period: float = PERIOD_S
    max_wait: float = MAX_WAIT_S
    rng: random.Random = field(default_factory=random.Random)  # its own: the jitter draws from no one else's
    reintroduced: int = field(default=0, init=False)  # pings of a missing bootstrap that it answered
    _missing: dict[str, _Missing] = field(default_factory=dict, init=False)

    own: str = ""  # this node's p2p peer id: listed among its own bootstraps, it is not watched

    def peers(self) -> dict[str, list[str]]:
        """Each bootstrap's peer id and where to dial it: its configured addresses less the peer
        part (the last ``/p2p/<id>``), relayed ones left out (p2pd cannot parse a circuit address
        handed to ``connect``; it finds a relayed peer's route itself, and the ping still goes)."""
        by_peer: dict[str, list[str]] = {}
        for a in self.bootstraps:
            pid = peer_id_of(a)
            if pid and pid != self.own:
                dials = by_peer.setdefault(pid, [])
                if not relayed(a):
                    dials.append(a.rsplit("/p2p/", 1)[0])
        return by_peer

    def due(self, now: float, known: Callable[[str], bool]) -> list[str]:
        """The bootstraps (peer ids) to ping at ``now``: missing from the routing table (``known``
        says whether one is in it) and past their back-off. One that is known again is forgotten,
        so a later absence starts from the first wait."""
        out = []
        for pid in self.peers():
            if known(pid):
                self._missing.pop(pid, None)
                continue
            m = self._missing.get(pid)
            if m is None:  # just found missing: ping now, then back off
                m = self._missing[pid] = _Missing(Backoff(first=self.period, cap=self.max_wait), now)
            if now >= m.next_try:
                m.next_try = now + m.backoff.next()
                out.append(pid)
        return out

    def answered(self, pid: str, ok: bool) -> None:
        """Record a ping's outcome: logged once per absence either way, counted when it answered."""
        m = self._missing.get(pid)
        if ok:
            self.reintroduced += 1
        if m is not None and not m.said:
            m.said = True
            if ok:
                log.info("bootstrap peer %s answers again and was missing from this node's routing table: "
                         "this node introduced itself, so nodes joining through it find this swarm", pid)
            else:
                log.info("bootstrap peer %s is not answering; this node keeps trying it every few minutes "
                         "(a restarted bootstrap learns the swarm from its nodes)", pid)

    def wait(self) -> float:
        return self.period * (1 + self.rng.uniform(-JITTER, JITTER))

    async def run(self, node, clock: Callable[[], float]) -> None:
        """Forever: look, ping what is due (``node``: the running hivemind DHTNode)."""
        from hivemind.p2p import PeerID
        from hivemind.utils.multiaddr import Multiaddr

        peers = {pid: (PeerID.from_base58(pid), [Multiaddr(a) for a in dials]) for pid, dials in self.peers().items()}
        while True:
            await asyncio.sleep(self.wait())
            table = node.protocol.routing_table  # read after the wait: the node is up by then
            for pid in self.due(clock(), lambda p: table.get(peer_id=peers[p][0]) is not None):
                peer, maddrs = peers[pid]
                try:  # the daemon may have forgotten its addresses while it was away: give them again
                    if maddrs:
                        await asyncio.wait_for(node.p2p._client.connect(peer, maddrs), DIAL_TIMEOUT_S)  # no public dial in hivemind
                    ok = await node.protocol.call_ping(peer) is not None
                except Exception as e:  # noqa: BLE001 - gone, refused, timed out: all mean "not now"
                    log.debug("bootstrap peer %s did not answer: %s", pid, e)
                    ok = False
                self.answered(pid, ok)


def log_if_failed(task: asyncio.Task) -> None:
    """A done-callback: a watch that ended on an error says so at once (it is not awaited until the
    transport closes, and a bootstrap left unwatched is the soak's second swarm again)."""
    if not task.cancelled() and task.exception() is not None:
        log.error("the bootstrap watch stopped: %r; a restarted bootstrap will not relearn this node",
                  task.exception())
