"""One scenario of the attack suite: the honest swarm (and, for an attack, the adversary) as one
``swarm-node sim`` run to its end, sampled while it runs and reported on every 10 s, then measured."""

from __future__ import annotations

import asyncio
import os
import shutil
import signal
import time
from pathlib import Path
from typing import Callable

from attack_suite.measure import measure, read_json
from attack_suite.sampler import MemorySampler
from attack_suite.scenarios import Setup


def progress_line(run_dir: Path, nodes: int, steps: int, adversary: bool) -> str:
    """Where each node (and the adversary) is, from their status files: the 10 s progress line."""
    from swarm_node.node.observe.status import describe_phase

    parts = []
    for i in range(nodes):
        st = read_json(run_dir / f"node{i}" / "status.json")
        phase = describe_phase(st) if st else "starting"
        parts.append(f"node{i} {st.get('step', 0)}/{steps} {phase.split(' (')[0]}")
    if adversary:
        st = read_json(run_dir / "adversary0" / "status.json")
        parts.append(f"adversary sent {sum((st.get('sent') or {}).values())}" if st else "adversary starting")
    waiting = "the nodes to load and join" if all(" 0/" in p for p in parts[:nodes]) else \
        f"every node to train {steps} steps"
    return " · ".join(parts) + f" · waiting for {waiting}"


async def run_scenario(name: str, attacks: tuple[str, ...], setup: Setup, run_dir: Path,
                       say: Callable[[str], None] = print, deadline_s: float | None = None) -> dict:
    """Run the honest swarm (plus an adversary running ``attacks``, if any) to the end, then
    measure it. A run past ``deadline_s`` is stopped as Ctrl-C stops a sim (what it did counts)."""
    from swarm_node.node.sim.runner import run_sim
    from swarm_node.node.sim.faults import MaliciousFault, SimFaults
    from swarm_node.node.sim.spec import SimSpec

    if run_dir.exists():
        shutil.rmtree(run_dir)
    faults = SimFaults(malicious=[MaliciousFault(attacks=list(attacks))]) if attacks else SimFaults()
    spec = SimSpec(nodes=setup.nodes, transport="hivemind", run_dir=run_dir, overrides=setup.overrides(),
                   seed=setup.seed, progress="off", faults=faults,
                   prepare_models=(setup.model,) if setup.model == "default" else ())
    sampler = MemorySampler([run_dir / f"node{i}" for i in range(setup.nodes)],
                            run_dir / "adversary0" if attacks else None)
    deadline_s = deadline_s or 120 + setup.steps * setup.round_seconds * 3
    t0 = time.time()

    deadline_hit = []

    async def watch() -> None:
        while True:
            await asyncio.sleep(10)
            say(f"  {name}: {time.time() - t0:.0f} s · " + progress_line(run_dir, setup.nodes, setup.steps, bool(attacks)))
            if not deadline_hit and time.time() - t0 > deadline_s:
                say(f"  {name}: past the {deadline_s:.0f} s deadline: stopping the nodes (as Ctrl-C does)")
                deadline_hit.append(True)
                os.kill(os.getpid(), signal.SIGINT)  # run_sim's handler: stop every node, write the summary

    say(f"  {name}: launching a bootstrap peer and {setup.nodes} honest nodes"
        + (f" + an adversary ({', '.join(attacks)})" if attacks else " (no attacker)"))
    tasks = [asyncio.create_task(sampler.run()), asyncio.create_task(watch())]
    try:
        summary = await run_sim(spec)
    finally:
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
    if summary.get("interrupted") and not deadline_hit:  # Ctrl-C: the nodes are stopped; so is the benchmark
        raise KeyboardInterrupt
    wall = time.time() - t0
    result = measure(name, attacks, setup, run_dir, sampler)
    result.update(wall_s=round(wall, 1), stopped_at_deadline=bool(deadline_hit), failed=summary.get("failed", {}))
    return result
