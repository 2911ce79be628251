"""``sim``: a whole swarm on this machine, one live table; and ``sim-worker``, its in-process nodes.

Everything a node would refuse (its config, the run folder, the device, a resume that does not
match) is checked here, once, before anything starts: one message, not N node failures.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import sys
from pathlib import Path

from swarm_node.node.cli.flags import overrides as config_overrides, raw_flags
from swarm_node.node.errors import ConfigError
from swarm_node.node.config.config import load_config
from swarm_node.node.transport.carriers import carrier

log = logging.getLogger("swarm_node")


def run_sim_worker(args: argparse.Namespace, unknown: list[str]) -> int:
    """The memory simulation's one process (started by ``sim --transport memory``)."""
    from swarm_node.node.observe.logs import setup_logging
    from swarm_node.node.sim.argv import flag_list
    from swarm_node.node.sim.worker import run_worker

    overrides = config_overrides(argparse.Namespace(), unknown)
    control_flags = config_overrides(argparse.Namespace(), flag_list(json.loads(args.control_flags)))
    node_flags = {int(i): config_overrides(argparse.Namespace(), flag_list(f))
                  for i, f in json.loads(args.node_flags).items()}
    setup_logging()
    return asyncio.run(run_worker(args.nodes, args.run_dir, args.seed, args.config, overrides,
                                  args.control, control_flags, node_flags))


def run_simulation(args: argparse.Namespace, unknown: list[str]) -> int:
    from swarm_node.node.observe.logs import setup_logging
    from swarm_node.node.sim.runner import run_sim
    from swarm_node.node.sim.spec import SimSpec
    from swarm_node.node.sim.preflight import check_prior_run, startup_warnings
    from swarm_node.node.sim.faults import load_faults

    overrides = config_overrides(argparse.Namespace(), unknown)
    if args.nodes < 1:
        raise ConfigError("--nodes must be at least 1")
    if args.control < 0:
        raise ConfigError("--control must be 0 or more")
    if args.control and args.roles != "full":
        raise ConfigError(f"--control compares sharing nodes with a node alone; with --roles {args.roles} the "
                          f"workers train nothing to compare (use --roles full)")
    total = args.nodes + args.control
    # The simulator's own keys (from the flags, else the config file): its folder, the base seed
    # (node i gets seed + i) and its display. Everything else goes to every node.
    if args.resume:
        overrides["run.resume"] = True
    sim_keys = {k: overrides.pop(k) for k in ("run.dir", "train.seed", "run.progress") if k in overrides}
    # Fail here, before anything starts, on a config no node would accept. (Over mqtt the broker is
    # the simulator's own, on a port it picks at start: any URL checks the rest.)
    swarm_carrier = carrier(args.transport)
    joining = {"swarm.transport": args.transport,
               **({"swarm.broker": "mqtt://127.0.0.1"} if swarm_carrier.needs_broker else {})}
    base = load_config(args.config, {**overrides, **joining})
    run_dir = Path(str(sim_keys.get("run.dir", base.run.dir if args.config and base.run.dir != "runs/solo" else "runs/sim")))
    seed = int(sim_keys.get("train.seed", base.train.seed))
    progress = str(sim_keys.get("run.progress", base.run.progress))
    faults = load_faults(args.faults)
    faults.check(total, args.transport)
    if args.workers is not None and (args.roles != "learner-workers" or not 1 <= args.workers < args.nodes):
        raise ConfigError(f"--workers {args.workers}: needs --roles learner-workers and 1 to {args.nodes - 1} workers "
                          f"(node0 is the learner)")
    if args.roles != "full" and (swarm_carrier.in_process or args.nodes < 2):
        raise ConfigError(f"--roles {args.roles} needs --transport hivemind, mqtt or libp2p and at least 2 nodes (a learner "
                          f"and a worker)")
    # Each node's own config (every node's flags plus its [[node]] overrides), valid or refused here;
    # a worker's learner id is not made yet: any well-formed one checks the rest.
    from swarm_node.node.sim.argv import flag_text, role_flags
    from swarm_node.node.sim.control import control_flags

    def node_config(i: int, extra: dict):
        return load_config(args.config, {**overrides, **joining, **role_flags(args.roles, i, "sn1" + "a" * 32, args.workers),
                                         **extra, **faults.flags_of(i)})

    node_cfgs = [node_config(i, {}) for i in range(args.nodes)]
    # A control node trains a sharing node's own I groups a step, alone (node/sim/control.py).
    alone = control_flags(node_cfgs[0]) if args.control else {}
    node_cfgs += [node_config(i, alone) for i in range(args.nodes, total)]
    for k in faults.kill:
        if k.at_step is not None and k.at_step > node_cfgs[k.node].train.steps:
            raise ConfigError(f"[[kill]] node {k.node} at_step {k.at_step}: the run has only "
                              f"{node_cfgs[k.node].train.steps} steps")
    # The nodes' own start-up checks, once, here: a mistake is one message before anything starts,
    # not N node failures after a model build.
    from swarm_node.node.run.preflight import check_device, check_model_source, check_resume_matches, check_run_dir
    from swarm_node.policies.model_source import BUILT_HERE, model_kind

    check_run_dir(run_dir)
    if swarm_carrier.needs_broker:
        from swarm_node.node.transport.mqtt.broker import mosquitto_binary

        mosquitto_binary()  # installed? (the simulator starts its own broker)
    for device in sorted({c.model.device for c in node_cfgs}):
        check_device(device)
    for name in sorted({c.model.name for c in node_cfgs}):
        check_model_source(name)
    setup_logging()
    if base.run.resume:
        for i, c in enumerate(node_cfgs):
            check_resume_matches(run_dir / f"node{i}" / "checkpoints", c.model.model_dump())
    # The children get the flags as the user wrote them (TOML text), not re-serialized values.
    raw = {k: v for k, v in raw_flags(unknown).items() if k not in sim_keys}
    if args.resume:
        raw["run.resume"] = "true"
    spec = SimSpec(nodes=total, control=args.control, control_flags={k: flag_text(v) for k, v in alone.items()},
                   transport=args.transport, run_dir=run_dir.resolve(),
                   config=args.config.resolve() if args.config else None,
                   overrides=raw, seed=seed, progress=progress, faults=faults, roles=args.roles, workers=args.workers,
                   prepare_models=tuple(sorted({c.model.name for c in node_cfgs if model_kind(c.model.name) in BUILT_HERE})))
    done = check_prior_run(spec, [c.train.steps for c in node_cfgs], base.run.resume)
    if done is not None:
        print(f"swarm-node: {done}", file=sys.stderr)
        if (run_dir / "summary.md").exists():
            print((run_dir / "summary.md").read_text())
        return 0
    for warning in startup_warnings(spec, node_cfgs):
        log.warning("%s", warning)
    summary = asyncio.run(run_sim(spec))
    print((run_dir / "summary.md").read_text())
    for plot in summary.get("plots", []):
        print(f"plot: {plot}")
    if summary["failed"]:
        return _report_failed_nodes(spec, summary["failed"])
    return 130 if summary["interrupted"] else 0


def _report_failed_nodes(spec, failed: dict[str, int]) -> int:
    """Say which nodes failed and where to read why. When every failure is a refused start
    (exit 2: a node's own config or environment check), pass the node's message on, exit 2."""
    from swarm_node.node.sim.spec import node_log

    def log_of(name: str) -> Path:  # "node3", or "nodes": the memory simulation's one process
        return node_log(spec, int(name.removeprefix("node")) if name[4:].isdigit() else 0)

    logs = sorted({str(log_of(n)) for n in failed})
    if failed and all(rc == 2 for rc in failed.values()):
        try:
            text = log_of(min(failed)).read_text(errors="replace")
        except OSError:
            text = ""
        lines = [ln for ln in text.splitlines() if ln.startswith("swarm-node: ")]
        if lines:
            print(f"{lines[-1]} ({len(failed)} node(s) refused to start; see {', '.join(logs)})", file=sys.stderr)
            return 2
    print(f"swarm-node: nodes failed: {failed} (see {', '.join(logs)})", file=sys.stderr)
    return 1
