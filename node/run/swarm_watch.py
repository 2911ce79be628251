"""What a node says, while it runs, about a swarm it hears nothing of: a worker whose learner is
not heard of, a node that hears no peer of its ``--swarm.name``.

Both mistakes look alike from inside (a node that trains or waits, silently): a worker following a
learner id that no node has, or nodes started with another ``--swarm.name`` than their peers,
which then share nothing, "0 peers alive". ``watch_swarm`` runs beside the node from its start
(node/run/startup.py): it says at once which learner a worker waits for, and after a bounded time
(``ALONE_ROUNDS`` rounds, at least ``ALONE_MIN_S``) warns, naming the likely cause, in the log and
as the status note (the simulator's table and summary show it). It ends once it has heard what it
waited for; a warning it gave is taken back if the peers turn up later.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Callable

log = logging.getLogger("swarm_node.node.run.trainer")

__all__ = ["watch_swarm", "alone_warning", "reached", "learner_heard", "ALONE_ROUNDS", "ALONE_MIN_S"]

ALONE_ROUNDS = 4  # rounds without a peer of its swarm before a node that reached others says so
ALONE_MIN_S = 15.0  # ...and at least this long: a DHT join and the first heartbeats take a few seconds
POLL_S = 0.5


def reached(info: dict, initial_peers: list[str], in_process: bool) -> str | None:
    """What the node reached besides peers of its swarm, from its transport's ``info()`` (a DHT
    routing table, connected peers, a broker), or None when it is alone for all it knows (the
    first node of a new swarm: nothing to warn about)."""
    routing = info.get("routing_peers")
    connected = info.get("connected")
    if isinstance(routing, int) and routing > 0:
        return f"{routing} peer(s) in its DHT routing table"
    if connected is True:
        return f"the broker {info.get('broker', '')}".rstrip()
    if isinstance(connected, int) and not isinstance(connected, bool) and connected > 0:
        return f"{connected} connected peer(s)"
    if initial_peers:
        return "its bootstrap peer(s)"
    return "the in-process hub" if in_process else None


def heard_any(swarm) -> bool:
    """Whether the exchange has heard any peer of its swarm (a heartbeat, or rollouts)."""
    return bool(swarm.peers) or bool(swarm.stats.groups_in)


def learner_heard(swarm, learner: str, role_status: dict) -> bool:
    """Whether the learner a worker follows has been heard of: its heartbeat or rollouts in the
    swarm, or a weight version it announced."""
    return (learner in swarm.peers or learner in swarm.stats.groups_in
            or role_status.get("pointer_version") is not None or bool(role_status.get("applied_versions")))


def alone_warning(name: str, waited_s: float, what: str, others: list[str] = ()) -> str:
    """``others``: swarm names the transport saw connected peers use (libp2p's gossip topics)."""
    if others:
        names = ", ".join(repr(o) for o in others)
        return (f"heard no peer of swarm {name!r} in {waited_s:.0f} s, but connected peers are in swarm {names}: "
                f"are the peers using another --swarm.name? (to join them: --swarm.name {others[0]})")
    return (f"heard no peer of swarm {name!r} in {waited_s:.0f} s, though this node reached {what}: are the "
            f"peers using another --swarm.name? (this node's is {name!r}; every node of a swarm must use the same)")


def learner_warning(learner: str, name: str, waited_s: float, others: int) -> str:
    return (f"no learner {learner} has been heard of in swarm {name!r} after {waited_s:.0f} s (heard {others} other "
            f"peer(s)): check --follow (the learner logs its \"peer id sn1...\" at start), that the learner is "
            f"running, and that it uses the same --swarm.name; still waiting")


async def watch_swarm(cfg, swarm, status, role_status: Callable[[], dict], in_process: bool) -> None:
    """Watch one node's swarm (see the module docstring); ``status`` is its StatusFile."""
    name, learner = cfg.swarm.name, cfg.broadcast.follow if cfg.broadcast.role == "worker" else ""
    if learner:
        log.info("worker: waiting for the weights of learner %s in swarm %r (--follow); nothing is generated "
                 "until they arrive", learner, name)
    since = time.monotonic()
    window = max(ALONE_ROUNDS * cfg.swarm.round_seconds, ALONE_MIN_S)
    warned: str | None = None
    while swarm._task is not None or swarm._loop is None:  # until the node closes its exchange
        await asyncio.sleep(POLL_S)
        waited = time.monotonic() - since
        if learner:
            ok = learner_heard(swarm, learner, role_status())
            text = None if ok or waited < window else learner_warning(learner, name, waited, len(swarm.peers))
        else:
            ok = heard_any(swarm)
            info = None if ok or waited < window else swarm.transport.info()
            what = reached(info, cfg.swarm.initial_peers, in_process) if info is not None else None
            others = (info or {}).get("other_swarms") or []
            text = alone_warning(name, waited, what, others) if what else None
        if ok:
            if warned is not None:
                log.info("heard %s of swarm %r after all", f"learner {learner}" if learner else "a peer", name)
                if status.extra.get("note") == warned:
                    status.extra.pop("note")
            return
        if text is not None and warned is None:
            log.warning("%s", text)
            warned = text.split(" (")[0] if learner else \
                f"heard no peer of swarm {name!r}: are the peers using another --swarm.name?" + \
                (f" (connected peers are in swarm {', '.join(map(repr, others))})" if others else "")
            status.write(note=warned)  # the simulator's table and summary show a node's note
