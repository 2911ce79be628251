"""One soak: the swarm as one ``swarm-node sim`` run with the schedule's faults, sampled every
10 s while it runs and stopped at the end of its minutes as Ctrl-C stops a sim (every node
checkpoints and exits), then judged from its samples and its folder."""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import signal
import time
from pathlib import Path
from typing import Callable

from common.report import command_line
from soak_suite import judge as J
from soak_suite.sampler import SoakSampler
from soak_suite.schedule import Schedule, faults_of
from soak_suite.verdict import targets

STEPS = 10_000_000  # the nodes train until the soak stops them


def sim_overrides(model: str, round_seconds: float, checkpoint_every: int, flags: dict[str, str]) -> dict[str, str]:
    return {"model.name": model, "train.steps": str(STEPS), "swarm.round_seconds": str(round_seconds),
            "run.checkpoint_every": str(checkpoint_every), "eval.at_start": "false", "eval.at_end": "false", **flags}


async def run_soak(sched: Schedule, run_dir: Path, nodes: int, workers: int, overrides: dict[str, str],
                   every: float, seed: int = 0, say: Callable[[str], None] = print) -> dict:
    """Run the swarm for the schedule's length; returns what was judged (and the samples)."""
    from swarm_node.node.sim.faults import SimFaults
    from swarm_node.node.sim.runner import run_sim
    from swarm_node.node.sim.spec import SimSpec
    from swarm_node.protocol.identity import load_or_create_identity

    if run_dir.exists():
        shutil.rmtree(run_dir)
    run_dir.mkdir(parents=True)
    run_dir = run_dir.resolve()
    ids = []
    for i in range(nodes):  # made now (the sim loads the same files) so the sampler knows who is honest
        (run_dir / f"node{i}").mkdir()
        ids.append(load_or_create_identity(run_dir / f"node{i}" / "identity.pem").peer_id)
    faults = SimFaults.model_validate(faults_of(sched))
    faults.check(nodes, "hivemind")
    model = overrides.get("model.name", "default")
    spec = SimSpec(nodes=nodes, transport="hivemind", run_dir=run_dir, overrides=overrides, seed=seed,
                   progress="plain", faults=faults, roles="learner-workers", workers=workers,
                   prepare_models=("default",) if model == "default" else ())
    sampler = SoakSampler(run_dir, nodes, len(faults.malicious), ids, every)
    state = {"stopping": False, "started": None}

    async def sample_and_stop() -> None:
        while spec.partition_start is None:  # the nodes are not launched yet (the model is being built)
            await asyncio.sleep(0.5)
        t0 = spec.partition_start
        say(f"soak: nodes launched; running {sched.seconds / 60:g} minutes")
        last_say = 0.0
        while True:
            try:
                await asyncio.to_thread(sampler.sample)
            except Exception as e:  # noqa: BLE001 - a sample lost, never the stop: the soak must end on time
                state["sample_errors"] = state.get("sample_errors", 0) + 1
                say(f"soak: a sample failed ({type(e).__name__}: {e}); going on")
            now = time.time()
            if now - last_say >= 60 and sampler.samples:
                last_say = now
                steps = [sampler.samples[-1]["nodes"][f"node{i}"]["step"] for i in range(nodes)]
                say(f"soak: {(now - t0) / 60:.1f} of {sched.seconds / 60:g} min · steps {steps}")
            if now - t0 >= sched.seconds:
                say("soak: time is up: stopping the nodes (as Ctrl-C does)")
                state["stopping"] = True
                os.kill(os.getpid(), signal.SIGINT)  # run_sim's handler: stop every node, write the summary
                return
            await asyncio.sleep(max(0.0, every - (time.time() - now)))

    task = asyncio.create_task(sample_and_stop())
    t_start = time.time()
    try:
        summary = await run_sim(spec)
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
    if summary.get("interrupted") and not state["stopping"]:  # Ctrl-C: the soak is stopped too
        raise KeyboardInterrupt
    meta = {"t0": spec.partition_start, "wall_s": time.time() - t_start, "adversaries": len(faults.malicious),
            "sample_errors": state.get("sample_errors", 0),
            "failed": summary.get("failed", {}), "schedule": sched.to_dict(), "overrides": overrides, "nodes": nodes,
            "command": command_line()}
    (run_dir / "soak_run.json").write_text(json.dumps(meta))
    return judge_folder(run_dir)


def judge_folder(run_dir: Path) -> dict:
    """Judge a finished soak from its sim folder (soak_run.json: its schedule, nodes and flags;
    samples.jsonl, faults.jsonl and the nodes' folders): what ``run_soak`` returns, and what
    ``--rejudge`` redoes."""
    from swarm_node.node.config.config import load_config, parse_flag_value
    from swarm_node.node.sim.timed import read_events

    meta = json.loads((run_dir / "soak_run.json").read_text())
    t0, sched, nodes, overrides = meta["t0"], Schedule.from_dict(meta["schedule"]), meta["nodes"], meta["overrides"]
    samples = [json.loads(x) for x in (run_dir / "samples.jsonl").read_text().splitlines() if x.strip()]
    cfg = load_config(None, {k: parse_flag_value(v) for k, v in overrides.items()})
    events = read_events(run_dir)
    judged = {
        "processes": J.judge_processes(samples, t0, sched.warm_up),
        "disk": J.judge_disk(samples, run_dir, nodes, cfg.run.keep_checkpoints),
        "resumes": J.judge_resumes(events, run_dir, nodes),
        "delivery": J.judge_delivery(samples, sched, t0, nodes, J.read_adversaries(run_dir, meta["adversaries"])),
        "tracebacks": J.judge_logs(run_dir),
        "worker_lag": J.judge_lag(samples, t0, sched.warm_up, events),
        "failed": meta["failed"],
    }
    seen: dict[tuple[str, int], str] = {}  # how each node process's join found the swarm (its last status)
    for s in samples:
        for n, st in s["nodes"].items():
            pid = (s["procs"].get(n) or {}).get("pid")
            if pid and st.get("found_via"):
                seen[(n, pid)] = st["found_via"]
    via: dict[str, int] = {}
    for v in seen.values():
        via[v] = via.get(v, 0) + 1
    return {"command": meta["command"], "t0": t0, "wall_s": meta["wall_s"], "schedule": sched.to_dict(), "overrides": overrides, "events": events, "judged": judged, "targets": targets(judged),
            "found_via": via, "samples": samples}
