"""``swarm-node sim``: a whole swarm on one machine, with one live status table.

Over ``hivemind`` the simulator starts a bootstrap peer and N ``swarm-node join`` processes on
127.0.0.1, exactly as users run them, each with its own run folder, identity and seed; over
``mqtt`` a local Mosquitto (node/transport/mqtt/broker.py, anonymous, loopback only) in place of the bootstrap
peer, and the same N processes joined with ``--transport mqtt``; over ``libp2p`` a py-libp2p
bootstrap host (no daemon) and N processes joined with ``--transport libp2p``. The
in-process ``memory`` transport cannot cross processes, so with it the N nodes run in one child
process sharing a hub (``swarm-node sim-worker``, node/sim/worker.py). Either way the simulator
itself only launches, watches (each node's ``status.json``) and stops; it trains nothing.

This module is the run itself: start, watch, stop, judge. The pieces are its neighbours:
children.py (the processes), argv.py (their command lines), infra.py (default model, bootstrap
peer, broker), kills.py (``[[kill]]`` faults), table.py (the live table), summary.py.

Run folder::

    sim.json             the command, nodes, transport, start/end
    faults.jsonl         each fault carried out (kill, restart, adversary start/stop, bootstrap stop/start)
    node0/ … nodeN-1/    each node's own run folder (metrics.jsonl, status.json, checkpoints, log)
    summary.json, summary.md   one row per node: steps, correctness first/last, groups, rejections
                         (``"partial": true`` after a stop; an earlier run's are removed at start)
    reward.png, ess.png  correctness and ESS/B per node over steps
"""

from __future__ import annotations

import asyncio
import json
import logging
import signal
import sys
import time
from pathlib import Path

from swarm_node.node.sim.argv import adversary_args, join_flags, node_args, worker_args
from swarm_node.node.sim.children import Children
from swarm_node.node.sim.infra import prepare_models, spawn_bootstrap, start_bootstrap, start_broker
from swarm_node.node.sim.kills import KillFaults
from swarm_node.node.sim.timed import EVENTS_FILE, TimedFaults
from swarm_node.node.sim.spec import SimSpec, is_control, node_log, processes
from swarm_node.node.sim.summary import clear_summary, write_summary
from swarm_node.node.sim.table import plain_line, render_table, status_rows
from swarm_node.node.transport.carriers import carrier


log = logging.getLogger(__name__)

__all__ = ["run_sim"]


class _Stopped(Exception):
    """Ctrl-C before the nodes were launched."""


async def _start_join_point(spec: SimSpec, kids: Children, stop: asyncio.Event):
    """The bootstrap peer (hivemind, libp2p) or the broker (mqtt) the nodes join through:
    (their ``join_flags``, the broker or None)."""
    if carrier(spec.transport).joins_through_bootstrap:
        maddr = await start_bootstrap(spec, kids, stop)
        if maddr is None:  # Ctrl-C while the bootstrap peer was starting
            raise _Stopped()
        return join_flags(spec.transport, maddr, None), None
    broker = await start_broker(spec)
    return join_flags(spec.transport, None, broker.url()), broker


def _launch_nodes(spec: SimSpec, kids: Children, how: list[str],
                 broker_url: str | None) -> tuple[KillFaults, TimedFaults]:
    """Start the N nodes; returns what carries out the ``[[kill]]`` faults, and the faults that
    follow the clock (the adversaries, each started at its time; bootstrap outages)."""

    def node_cmd(i: int) -> tuple[list[str], Path]:
        if is_control(spec, i):  # alone: no join point to name
            return ["train", *node_args(spec, i)], node_log(spec, i)
        return ["join", *how, *node_args(spec, i)], node_log(spec, i)

    # Identities up front: a partition names the peers on the other side by peer id.
    from swarm_node.protocol.identity import load_or_create_identity

    for i in range(spec.nodes):
        (spec.run_dir / f"node{i}").mkdir(exist_ok=True)
        spec.peer_ids.append(load_or_create_identity(spec.run_dir / f"node{i}" / "identity.pem").peer_id)
    spec.partition_start = time.time()
    for i in range(spec.nodes):
        kids.spawn(f"node{i}", *node_cmd(i))

    def adversary_cmd(j: int) -> tuple[list[str], Path]:
        d = spec.run_dir / f"adversary{j}"
        d.mkdir(exist_ok=True)
        return adversary_args(spec, j, how, broker_url), d / "adversary.log"

    timed = TimedFaults(spec, kids, adversary_cmd, lambda port: spawn_bootstrap(spec, kids, port))
    timed.step()  # the adversaries that start with the nodes
    return KillFaults(spec, kids, node_cmd), timed


async def _watch(spec: SimSpec, kids: Children, faults: KillFaults | None, timed: TimedFaults | None,
                 stop: asyncio.Event, mode: str) -> None:
    """Carry out the faults and show the table until every node has exited (or Ctrl-C)."""
    live = None
    if mode == "rich":
        from rich.console import Console
        from rich.live import Live

        live = Live(render_table(status_rows(spec, faults, kids), "swarm-node sim"), console=Console(stderr=True),
                    refresh_per_second=2)
        live.start()
    try:
        last_plain = 0.0
        node_names = {n for n, _ in kids.procs if n.startswith("node")}

        def running() -> bool:
            return bool(node_names & set(kids.alive())) or (faults is not None and faults.waiting)

        while not stop.is_set() and running():
            if faults is not None:
                faults.step()
            if timed is not None:
                timed.step()
            rows = status_rows(spec, faults, kids)
            if live is not None:
                live.update(render_table(rows, f"swarm-node sim · {spec.transport} · {spec.nodes} nodes"))
            elif mode == "plain" and time.time() - last_plain > 10:
                last_plain = time.time()
                log.info("sim: %s", plain_line(rows))
            try:
                await asyncio.wait_for(stop.wait(), timeout=0.5)
            except asyncio.TimeoutError:
                pass
    finally:
        if live is not None:
            live.stop()


async def run_sim(spec: SimSpec) -> dict:
    """Launch, watch and stop the swarm; returns the summary (also written to the run folder).

    Any stop writes what is known, marked partial: at once when the stop begins (the nodes may
    take their grace period to checkpoint), then again once they have stopped. A second Ctrl-C
    or SIGTERM kills what is still stopping, and the summary is written all the same."""
    spec.run_dir.mkdir(parents=True, exist_ok=True)
    clear_summary(spec.run_dir)  # an earlier run's summary must not pass for this one's
    (spec.run_dir / EVENTS_FILE).unlink(missing_ok=True)  # nor its faults this one's
    kids = Children()
    stop = asyncio.Event()
    stopped_by: list[str] = []
    loop = asyncio.get_running_loop()

    def on_signal(sig: int) -> None:
        stopped_by.append(signal.Signals(sig).name)
        if stop.is_set():  # asked again: no more grace for the nodes
            log.warning("sim: %s again: stopping the nodes now", stopped_by[-1])
            kids.hurry()
        stop.set()

    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, on_signal, sig)
    try:
        return await _run(spec, kids, stop, stopped_by)
    finally:  # only once the summary is written: a signal before then must not cut it short
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.remove_signal_handler(sig)


async def _run(spec: SimSpec, kids: Children, stop: asyncio.Event, stopped_by: list[str]) -> dict:
    t0 = time.time()
    meta = {"nodes": spec.nodes, "control": spec.control, "transport": spec.transport, "argv": sys.argv, "started_at": t0,
            "overrides": spec.overrides, "config": str(spec.config) if spec.config else None,
            "faults": spec.faults.model_dump()}
    (spec.run_dir / "sim.json").write_text(json.dumps(meta, indent=2))
    mode = spec.progress
    if mode == "auto":
        mode = "rich" if sys.stderr.isatty() else "plain"
    interrupted = False
    faults = timed = None
    broker = None
    try:
        if spec.prepare_models:
            if not await prepare_models(spec.prepare_models, mode, stop):
                raise _Stopped()
        if processes(spec):
            how, broker = await _start_join_point(spec, kids, stop)
            faults, timed = _launch_nodes(spec, kids, how, broker.url() if broker is not None else None)
        else:
            kids.spawn("nodes", worker_args(spec), spec.run_dir / "nodes.log")
        await _watch(spec, kids, faults, timed, stop, mode)
        interrupted = stop.is_set()
    except _Stopped:
        interrupted = True
    finally:
        if stop.is_set():  # what is known now: the nodes may take their grace period to stop
            _write_early(spec, time.time() - t0, faults, stopped_by)
        await asyncio.to_thread(kids.stop)
        if broker is not None:
            broker.stop()  # after the nodes: they say goodbye through it
    # Judge each node by its last process; a process the simulator killed (fault, a second
    # Ctrl-C) or stopped (SIGTERM before the node could install its handler: -15) did not fail.
    ok = {0, 130} | ({-signal.SIGTERM} if kids.terminated else set())
    last = {n: p for n, p in kids.procs if n.startswith("node")}
    failed = {n: p.returncode for n, p in last.items() if id(p) not in kids.killed and p.returncode not in ok}
    return write_summary(spec, time.time() - t0, interrupted, failed, faults, stopped_by=stopped_by[:1])


def _write_early(spec: SimSpec, wall_s: float, faults: KillFaults | None, stopped_by: list[str]) -> None:
    """The summary as a stop begins, without plots; rewritten once the nodes have stopped."""
    try:
        write_summary(spec, wall_s, True, {}, faults, stopped_by=stopped_by[:1], stopping=True)
    except Exception as e:  # the final summary is still to come: never let this one end the stop
        log.warning("sim: could not write the summary as the stop began: %s: %s", type(e).__name__, e)
