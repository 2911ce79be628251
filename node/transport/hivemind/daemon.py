"""Starting and stopping a hivemind DHT node and its p2p daemon (p2pd): the node's and the
bootstrap peer's way into the swarm.

Joining is where rl-swarm users get stuck, so it is explicit: the daemon gets a configurable
start-up timeout, every failure says what to check, and start-up retries with exponential
back-off (node/transport/backoff.py) before giving up with a ``TransportError``. Stopping works
even when the daemon is already gone.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Callable, Optional

from hivemind.dht.node import DHTNode
from hivemind.dht.validation import RecordValidatorBase
from hivemind.p2p import P2PDaemonError

import swarm_node.node.transport.hivemind.patches  # noqa: F401  (hivemind's DHT, patched at import: see that module)
from swarm_node.node.observe.logs import adopt_library_logging
from swarm_node.node.transport.backoff import JOIN_BACKOFF_S, JOIN_RETRIES, TryAgain, retry
from swarm_node.node.transport.base import TransportError

adopt_library_logging()  # JSON logs: hivemind's own handler gives way to the node's

log = logging.getLogger("swarm_node.node.transport.hivemind.transport")  # the transport's log name, as before the split

__all__ = ["start_dht_node", "stop_dht_node"]


def _no_bootstrap(initial_peers: list[str]) -> str:
    return (f"no bootstrap peer answered ({', '.join(initial_peers)}): check the addresses (each "
            f"ends in /p2p/<peer id>, as `swarm-node bootstrap` prints it), that the bootstrap node "
            f"is running and that its port is reachable from here (firewall, NAT)")


async def start_dht_node(*, initial_peers: list[str], host_maddrs: list[str],
                         announce_maddrs: list[str] | None = None, identity_path: str | None = None,
                         startup_timeout: float = 30.0, retries: int = JOIN_RETRIES, backoff: float = JOIN_BACKOFF_S,
                         use_relay: bool = True, nat_port_map: bool = True,
                         record_validator: RecordValidatorBase | None = None,
                         on_retry: Optional[Callable[[str], None]] = None, p2p_options: dict | None = None):
    """Start a DHTNode with health checks; retries with back-off, then a clear ``TransportError``.
    ``on_retry`` hears a one-line summary of each failed attempt (for the node's status);
    ``p2p_options``: more of ``P2P.create``'s options, over these (behind NAT: node/transport/hivemind/nat.py)."""
    kwargs = dict(host_maddrs=host_maddrs, startup_timeout=startup_timeout, use_relay=use_relay,
                  nat_port_map=nat_port_map, auto_nat=nat_port_map)
    if announce_maddrs:
        kwargs["announce_maddrs"] = announce_maddrs
    kwargs.update(p2p_options or {})
    if identity_path:
        kwargs["identity_path"] = identity_path

    async def create():
        try:
            return await DHTNode.create(initial_peers=initial_peers or None,
                                        ensure_bootstrap_success=bool(initial_peers),
                                        record_validator=record_validator, **kwargs)
        except P2PDaemonError as e:
            if "already taken" in str(e):
                raise TransportError(
                    f"the p2p identity {identity_path} is in use by another running peer: stop the "
                    f"other node, or give this one its own --swarm.identity") from e
            if "bootstrap" in str(e):
                raise TryAgain(_no_bootstrap(initial_peers)) from e
            raise TryAgain(f"the p2p daemon (p2pd) did not start: {e}. If the machine is slow or busy, "
                           f"raise --swarm.startup_timeout (now {startup_timeout:g} s); check that "
                           f"{host_maddrs} are free addresses of this machine") from e
        except RuntimeError as e:
            if "bootstrap" not in str(e):
                raise
            await _stop_half_made(e)
            raise TryAgain(_no_bootstrap(initial_peers)) from e

    def retrying(attempt: int, failure: TryAgain, delay: float) -> None:
        problem = str(failure)
        log.warning("joining failed (attempt %d/%d): %s; retrying in %.1f s", attempt + 1,
                    retries + 1, problem, delay)
        if on_retry is not None:
            on_retry(f"attempt {attempt + 1}/{retries + 1} failed: {problem.split(':')[0]}; "
                     f"retrying in {delay:.0f} s")

    try:
        return await retry(create, retries=retries, first_delay=backoff, before_wait=retrying)
    except TryAgain as e:
        raise TransportError(f"could not join the swarm after {retries + 1} attempts: {e}") from None


async def _stop_half_made(e: BaseException) -> None:
    """A ``DHTNode.create`` that reached none of its bootstrap peers raises with its p2pd still
    running (hivemind stops a daemon only through a node it returned): find that node in the
    failure's frames and stop it, so no daemon of a failed attempt lives on until exit (where its
    subprocess transport prints "Event loop is closed" tracebacks)."""
    tb = e.__traceback__
    while tb is not None:
        made = tb.tb_frame.f_locals.get("self")
        if isinstance(made, DHTNode) and getattr(made, "p2p", None) is not None:
            await stop_dht_node(made, timeout=5.0)
            return
        tb = tb.tb_next


async def stop_dht_node(node, timeout: float = 10.0) -> None:
    """Shut a DHTNode and its p2pd down, even when the daemon is already gone.

    A Ctrl-C in a terminal signals the whole process group, so p2pd often dies before the node
    shuts down; ``DHTNode.shutdown`` then waits forever on the dead daemon's control socket.
    Give it ``timeout`` seconds, then stop the daemon directly.
    """
    try:
        await asyncio.wait_for(node.shutdown(), timeout)
    except (asyncio.TimeoutError, ConnectionError, OSError) as e:
        log.debug("DHT node shutdown did not finish (%s); stopping p2pd directly", type(e).__name__)
        try:
            await asyncio.wait_for(node.p2p.shutdown(), timeout)
        except (asyncio.TimeoutError, ConnectionError, OSError):
            log.warning("p2pd did not stop within %.0f s", timeout)
    finally:
        _retrieve_reader_failure(node)


def _retrieve_reader_failure(node) -> None:
    """hivemind's control client reads and writes the daemon's persistent connection in tasks of
    its own; when p2pd died first (Ctrl-C in a terminal, or ``timeout``, signals the whole process
    group) they end in ConnectionResetError that nothing retrieves, and asyncio prints it with a
    traceback ("Task exception was never retrieved") on a clean stop. Retrieve it, now or when
    the task ends."""
    control = getattr(getattr(getattr(node, "p2p", None), "_client", None), "control", None)
    for task in (getattr(control, "_read_task", None), getattr(control, "_write_task", None)):
        if isinstance(task, asyncio.Task):
            task.add_done_callback(_retrieve)


def _retrieve(task: asyncio.Task) -> None:
    if not task.cancelled() and task.exception() is not None:
        log.debug("p2pd's connection ended before the stop: %s", type(task.exception()).__name__)
