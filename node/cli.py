"""The ``swarm-node`` command line: a thin launcher over the node.

Heavy libraries (torch, transformers) are imported only after arguments parse, so ``--help``
and config errors answer at once. Every config field is a flag (``--section.key value``, TOML
syntax); a TOML file passed with ``--config`` supplies the rest.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import signal
import sys
import traceback
from pathlib import Path

from node.run.config import flag_fields, load_config, parse_flag_value, read_toml, show_value, string_keys
from node.errors import ConfigError
from protocol.errors import SwarmError

log = logging.getLogger("swarm_node")

JOIN_RUN_DIR = "runs/join"  # join's run folder unless --run.dir or the config names one

EXAMPLES = """\
examples:
  swarm-node train                                   # embedded default model and tasks, solo node
  swarm-node train --config docs/examples/demo.toml --train.steps 500
  swarm-node train --run.dir runs/a --resume          # continue after Ctrl-C or a crash
  swarm-node train --learner.baseline median --generation.num_generations 4
  swarm-node sim --nodes 4 --train.steps 200        # a local swarm: 4 nodes, one live table, plots
  swarm-node bootstrap --port 31337                  # run a bootstrap peer; prints its multiaddr
  swarm-node join --bootstrap /ip4/1.2.3.4/tcp/31337/p2p/QmWyMy...   # train in a public swarm
  swarm-node build-model                             # build/cache the embedded default model
  swarm-node plot runs/solo                          # (re)draw reward_curve.png (or a sim folder's plots)

Every [section] key of the config file is also a flag --section.key (values in TOML syntax).
"""


def _add_config_flags(p: argparse.ArgumentParser) -> None:
    p.add_argument("--config", type=Path, help="TOML config file (flags override it)")
    groups: dict[str, argparse._ArgumentGroup] = {}
    for section, name, default, help_, choices in flag_fields():
        g = groups.get(section) or groups.setdefault(section, p.add_argument_group(f"[{section}]"))
        allowed = f"; one of: {', '.join(map(show_value, choices))}" if choices else ""
        g.add_argument(f"--{section}.{name}", dest=f"{section}.{name}", metavar="V",
                       default=argparse.SUPPRESS, help=f"{help_} (default: {show_value(default)}{allowed})")


def _overrides(ns: argparse.Namespace, unknown: list[str]) -> dict:
    """Config overrides from the known flags, plus unknown ``--section.key value`` pairs, which
    are passed on so config validation rejects them with the valid keys listed."""
    verbatim = string_keys()

    def value_of(key: str, text: str):
        return text if key in verbatim else parse_flag_value(text)

    out = {k: value_of(k, v) for k, v in vars(ns).items() if "." in k}
    it = iter(unknown)
    for arg in it:
        if not (arg.startswith("--") and "." in arg):
            raise ConfigError(f"unrecognized argument {arg!r} (see swarm-node train --help)")
        key, eq, value = arg[2:].partition("=")
        if not eq:
            value = next(it, None)
            if value is None:
                raise ConfigError(f"flag {arg} needs a value")
        out[key] = value_of(key, value)
    return out


def _add_role_flags(p: argparse.ArgumentParser) -> None:
    p.add_argument("--role", choices=["full", "learner", "worker"], default=None,
                   help="full (default): generate, train and share; learner: also publish its weights to "
                        "followers every --broadcast.publish_every steps; worker: follow a learner's weights "
                        "(--follow), generate and share with them, train nothing (same as --broadcast.role)")
    p.add_argument("--follow", default=None, metavar="PEER_ID",
                   help="worker: the learner's peer id, as it logs it at start (same as --broadcast.follow)")


def _add_profile_flag(p: argparse.ArgumentParser) -> None:
    from node.gpu.select import PROFILE_CHOICES

    p.add_argument("--profile", default="auto", choices=PROFILE_CHOICES, metavar="PROFILE",
                   help="memory profile: auto (default) reads the free memory of the CUDA device in "
                        "--model.device and picks LoRA rank, micro-batch, gradient checkpointing, bf16 and "
                        "generation batch to fit it, with a margin; 8gb, 12gb, 16gb, 24gb, 40gb or 80gb plan "
                        "for a card of that size; none uses the settings as configured. Settings you give "
                        "(flags or TOML) always win; the choice and its estimate are printed at start")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="swarm-node", allow_abbrev=False,
        description="A peer-to-peer node for reinforcement learning of language models: it "
                    "generates rollouts on verifiable tasks, scores them locally and trains its "
                    "policy with off-policy-corrected GRPO (ESS-scaled learning rate).",
        epilog=EXAMPLES, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")

    train = sub.add_parser("train", help="train one node (solo) on the configured tasks", allow_abbrev=False,
                           description="Train one node. Writes metrics.jsonl, checkpoints, "
                                       "reward_curve.png and summary.json into --run.dir.",
                           epilog=EXAMPLES, formatter_class=argparse.RawDescriptionHelpFormatter)
    _add_config_flags(train)
    train.add_argument("--resume", action="store_true",
                       help="continue from the newest valid checkpoint in --run.dir (same as --run.resume true)")
    train.add_argument("--print-config", action="store_true", help="print the resolved config as JSON and exit")
    _add_profile_flag(train)

    join = sub.add_parser(
        "join", help="train in a swarm: the public one over hivemind, or a private cluster's through an MQTT broker",
        allow_abbrev=False,
        description="Join a swarm and train: every round the node publishes its signed rollouts and "
                    "trains on I of its own plus J of its peers' (SAPO). The Ed25519 key in "
                    "--swarm.identity (default <run.dir>/identity.pem) is the node's identity; keep "
                    "it to rejoin as the same peer.",
        epilog=EXAMPLES, formatter_class=argparse.RawDescriptionHelpFormatter)
    join.add_argument("--bootstrap", action="append", default=[], metavar="MADDR",
                      help="multiaddr of a bootstrap peer, as `swarm-node bootstrap` prints it "
                           "(repeat for several; same as --swarm.initial_peers)")
    join.add_argument("--transport", choices=["hivemind", "libp2p", "mqtt"], default=None,
                      help="hivemind (default): the public swarm's DHT; libp2p: gossipsub on a pure-Python "
                           "libp2p host, no daemon (its own swarms: bootstrap with `swarm-node bootstrap "
                           "--transport libp2p`); mqtt: a private cluster's broker (--broker; "
                           "docs/private-cluster.md). Same as --swarm.transport")
    join.add_argument("--broker", metavar="URL", default=None,
                      help="mqtt: the broker, mqtts://user@host:8883 (TLS) or mqtt://user@host:1883, user = this "
                           "node's account; the password is read from --swarm.broker_password_file or "
                           "$SWARM_NODE_MQTT_PASSWORD, never from the command line. Same as --swarm.broker")
    _add_config_flags(join)
    join.add_argument("--new-swarm", action="store_true",
                      help="start a new swarm with this node as its first peer (no --bootstrap); others join "
                           "it at the address it logs")
    join.add_argument("--resume", action="store_true", help="continue from the newest valid checkpoint in --run.dir")
    join.add_argument("--print-config", action="store_true", help="print the resolved config as JSON and exit")
    _add_role_flags(join)
    _add_profile_flag(join)

    boot = sub.add_parser(
        "bootstrap", help="run a bootstrap (and relay) peer that nodes join through",
        description="Run a peer that others use as --bootstrap: a hivemind DHT peer (default) or, with "
                    "--transport libp2p, a py-libp2p host answering peer exchange (no daemon). It prints "
                    "its multiaddrs (one per line) and serves until Ctrl-C. It trains nothing.")
    boot.add_argument("--transport", choices=["hivemind", "libp2p"], default="hivemind",
                      help="the carrier of the swarms it bootstraps (default hivemind); a libp2p node needs a "
                           "libp2p bootstrap")
    boot.add_argument("--host", default="0.0.0.0", help="IPv4 address to listen on (default: all)")
    boot.add_argument("--port", type=int, default=31337, help="TCP port (0 = any free port; default 31337)")
    boot.add_argument("--announce", action="append", default=[], metavar="MADDR",
                      help="public multiaddr to announce (behind NAT or port forwarding)")
    boot.add_argument("--initial-peers", action="append", default=[], metavar="MADDR",
                      help="other bootstrap peers to connect to (a redundant set)")
    boot.add_argument("--identity", type=Path, default=None,
                      help="p2p key file, so the multiaddr stays the same across restarts "
                           "(default: $SWARM_NODE_HOME/bootstrap.p2p.key; libp2p: an Ed25519 PEM, "
                           "$SWARM_NODE_HOME/bootstrap.libp2p.pem)")
    boot.add_argument("--no-relay", action="store_true", help="do not relay traffic for peers behind NAT")
    boot.add_argument("--no-nat", action="store_true", help="no UPnP port mapping or AutoNAT (loopback, clusters)")
    boot.add_argument("--startup-timeout", type=float, default=30.0, help="seconds p2pd may take to start")
    boot.add_argument("--maddr-file", type=Path, help="also write the multiaddrs to this file")

    sim = sub.add_parser(
        "sim", help="run a whole swarm on this machine (N node processes) with one live status table",
        allow_abbrev=False,
        description="Start N nodes on 127.0.0.1 (over hivemind: a bootstrap peer and N `swarm-node "
                    "join` processes; over memory: N nodes in one process sharing an in-memory hub), "
                    "show one status table, stop them all on Ctrl-C or when they finish, and write "
                    "summary.md/json and reward.png/ess.png into --run.dir. Every other "
                    "--section.key flag (or --config) applies to every node; node i gets seed "
                    "--train.seed + i and the folder RUN_DIR/node<i>.",
        epilog="example: swarm-node sim --nodes 4 --train.steps 200 --swarm.round_seconds 1.5",
        formatter_class=argparse.RawDescriptionHelpFormatter)
    sim.add_argument("--nodes", type=int, default=4, help="number of nodes (default 4)")
    sim.add_argument("--transport", choices=["hivemind", "mqtt", "libp2p", "memory"], default="hivemind",
                     help="hivemind: real processes and daemons on loopback (default); mqtt: real processes "
                          "through a local Mosquitto the simulator starts (apt-get install mosquitto); libp2p: "
                          "real processes on py-libp2p hosts, no daemon; memory: in one process")
    sim.add_argument("--roles", choices=["full", "learner-workers"], default="full",
                     help="full (default): every node generates, trains and shares; learner-workers: node0 is a "
                          "learner publishing its weights, the others are workers following it (hivemind, libp2p or "
                          "mqtt; docs/broadcast.md)")
    sim.add_argument("--config", type=Path, help="TOML config for every node")
    sim.add_argument("--resume", action="store_true", help="resume every node from its newest checkpoint")

    sim.add_argument("--faults", type=Path, help="TOML file of faults to inject (hivemind, mqtt or libp2p): per-node "
                                                 "overrides (stale, heterogeneous nodes), kills with restart, "
                                                 "partitions, latency, malicious peers; see docs/running.md")

    adv = sub.add_parser(
        "adversary", allow_abbrev=False,
        help="join a swarm as a malicious peer that publishes hostile messages (for testing a swarm)",
        description="Join like a node (same config and flags) and publish one hostile message per "
                    "round, cycling through --attacks. Honest nodes must reject them all. It trains "
                    "nothing; RUN_DIR/status.json counts what it sent.")
    adv.add_argument("--bootstrap", action="append", default=[], metavar="MADDR", help="as for join")
    adv.add_argument("--attacks", default="all", help="comma-separated attacks, or all (see node/sim/adversary.py)")
    _add_config_flags(adv)

    worker = sub.add_parser("sim-worker")  # the memory simulation's process; no help: not for users
    worker.add_argument("--nodes", type=int, required=True)
    worker.add_argument("--run-dir", type=Path, required=True)
    worker.add_argument("--seed", type=int, default=0)
    worker.add_argument("--config", type=Path)

    ident = sub.add_parser(
        "id", help="print a node's peer id (making its key first if it has none)",
        description="Print the peer id (sn1...) of the node whose Ed25519 key is --identity, by default "
                    "<run dir>/identity.pem, the file `join` uses; the key is made (0600) if it does not exist, "
                    "and the node reuses it. A private cluster's operator names each node's broker account "
                    "after it, so the broker's ACL can keep the node to its own topics (docs/private-cluster.md).")
    ident.add_argument("--run-dir", type=Path, default=Path(JOIN_RUN_DIR), help=f"the node's run folder (default {JOIN_RUN_DIR})")
    ident.add_argument("--identity", type=Path, default=None, help="the key file (default <run dir>/identity.pem)")

    build = sub.add_parser("build-model", help="build and cache the embedded default model")
    build.add_argument("--out", type=Path, help="write the model here instead of the cache")

    plot = sub.add_parser("plot", help="draw reward_curve.png for a run folder (or a sim folder's plots)",
                          description="Redraw a run folder's reward_curve.png from its metrics.jsonl; for a "
                                      "`swarm-node sim` folder, its reward.png and ess.png and each node's curve.")
    plot.add_argument("run_dir", type=Path, help="a run folder (--run.dir) or a sim folder")
    return parser


def _with_profile(cfg, args: argparse.Namespace, overrides: dict):
    """The config with the memory profile's settings where the user set none (node/gpu/select.py)."""
    from node.gpu.select import check_settings_fit, describe, plan_profile, profile_overrides

    plan = plan_profile(cfg, args.profile)
    if plan is None:
        return cfg
    for line in describe(plan):
        log.info("%s", line)
    explicit = set(overrides) | (_flat_keys(read_toml(args.config)) if args.config else set())
    chosen = {k: v for k, v in profile_overrides(plan).items() if k not in explicit}
    cfg = load_config(args.config, {**chosen, **overrides})
    warning = check_settings_fit(plan, cfg)
    if warning:
        log.warning("%s", warning)
    return cfg


def _flat_keys(toml: dict) -> set[str]:
    return {f"{section}.{key}" for section, table in toml.items() if isinstance(table, dict) for key in table}


async def _train(cfg) -> dict:
    from transformers.utils import logging as hf_logging

    from node.run.trainer import TrainingNode

    hf_logging.disable_progress_bar()  # the node's own progress display is the one to read

    node = await TrainingNode.create(cfg)
    try:
        return await node.run()
    finally:
        await node.close()


def _raw_flags(unknown: list[str]) -> dict[str, str]:
    """``--section.key value`` pairs as written (``_overrides`` has already checked their form)."""
    out, it = {}, iter(unknown)
    for arg in it:
        key, eq, value = arg[2:].partition("=")
        out[key] = value if eq else next(it)
    return out


def _say(message: str, level: int) -> None:
    """The CLI's closing message: a plain line on stderr, or a JSON record under --run.log_format json."""
    from node.observe.logs import json_mode

    if json_mode():
        log.log(level, "%s", message)
    else:
        print(message, file=sys.stderr)


def _report_failed_nodes(spec, failed: dict[str, int]) -> int:
    """Say which nodes failed and where to read why. When every failure is a refused start
    (exit 2: a node's own config or environment check), pass the node's message on, exit 2."""
    from node.sim.runner import node_log

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


def _simulate(args: argparse.Namespace, unknown: list[str]) -> int:
    from node.observe.logs import setup_logging
    from node.sim.runner import SimSpec, check_prior_run, load_faults, run_sim, run_worker, startup_warnings

    overrides = _overrides(argparse.Namespace(), unknown)
    if args.command == "sim-worker":
        setup_logging()
        return asyncio.run(run_worker(args.nodes, args.run_dir, args.seed, args.config, overrides))
    if args.nodes < 1:
        raise ConfigError("--nodes must be at least 1")
    # The simulator's own keys (from the flags, else the config file): its folder, the base seed
    # (node i gets seed + i) and its display. Everything else goes to every node.
    if args.resume:
        overrides["run.resume"] = True
    sim_keys = {k: overrides.pop(k) for k in ("run.dir", "train.seed", "run.progress") if k in overrides}
    # Fail here, before anything starts, on a config no node would accept. (Over mqtt the broker is
    # the simulator's own, on a port it picks at start: any URL checks the rest.)
    carrier = {"swarm.transport": args.transport, **({"swarm.broker": "mqtt://127.0.0.1"} if args.transport == "mqtt" else {})}
    base = load_config(args.config, {**overrides, **carrier})
    run_dir = Path(str(sim_keys.get("run.dir", base.run.dir if args.config and base.run.dir != "runs/solo" else "runs/sim")))
    seed = int(sim_keys.get("train.seed", base.train.seed))
    progress = str(sim_keys.get("run.progress", base.run.progress))
    faults = load_faults(args.faults)
    faults.check(args.nodes, args.transport)
    if args.roles != "full" and (args.transport == "memory" or args.nodes < 2):
        raise ConfigError(f"--roles {args.roles} needs --transport hivemind, mqtt or libp2p and at least 2 nodes (a learner "
                          f"and a worker)")
    # Each node's own config (every node's flags plus its [[node]] overrides), valid or refused here;
    # a worker's learner id is not made yet: any well-formed one checks the rest.
    from node.sim.runner import role_flags

    node_cfgs = [load_config(args.config, {**overrides, **carrier,
                                           **role_flags(args.roles, i, "sn1" + "a" * 32),
                                           **{k: v for o in faults.node if o.index == i for k, v in o.flags.items()}})
                 for i in range(args.nodes)]
    for k in faults.kill:
        if k.at_step > node_cfgs[k.node].train.steps:
            raise ConfigError(f"[[kill]] node {k.node} at_step {k.at_step}: the run has only "
                              f"{node_cfgs[k.node].train.steps} steps")
    # The nodes' own start-up checks, once, here: a mistake is one message before anything starts,
    # not N node failures after a model build.
    from node.run.preflight import check_device, check_resume_matches, check_run_dir

    check_run_dir(run_dir)
    if args.transport == "mqtt":
        from node.transport.mqtt.broker import mosquitto_binary

        mosquitto_binary()  # installed? (the simulator starts its own broker)
    for device in sorted({c.model.device for c in node_cfgs}):
        check_device(device)
    setup_logging()
    if base.run.resume:
        for i, c in enumerate(node_cfgs):
            check_resume_matches(run_dir / f"node{i}" / "checkpoints", c.model.model_dump())
    # The children get the flags as the user wrote them (TOML text), not re-serialized values.
    raw = {k: v for k, v in _raw_flags(unknown).items() if k not in sim_keys}
    if args.resume:
        raw["run.resume"] = "true"
    spec = SimSpec(nodes=args.nodes, transport=args.transport, run_dir=run_dir.resolve(),
                   config=args.config.resolve() if args.config else None,
                   overrides=raw, seed=seed, progress=progress, faults=faults, roles=args.roles,
                   build_default_model=any(c.model.name == "default" for c in node_cfgs))
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


def main(argv: list[str] | None = None) -> int:
    from node.daemon_thread import exit_if_work_abandoned, work_abandoned

    # A shell starts a background job ('swarm-node train &' from a script) with SIGINT ignored,
    # and asyncio.run then leaves it so: a Ctrl-C or `kill -INT` during start-up would be lost,
    # while the running node (loop.add_signal_handler) stops on it. One behaviour: it stops.
    if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        rc = _main(argv)
    except BaseException:
        if work_abandoned():  # report it, then leave without finalizing under the thread
            traceback.print_exc()
            exit_if_work_abandoned(1)
        raise
    exit_if_work_abandoned(rc)  # a Ctrl-C left a model build running: do not finalize under it
    return rc


def _main(argv: list[str] | None) -> int:
    parser = build_parser()
    # Prefix abbreviations are off: --learner.learning_rat must be an error, never learning_rate.
    args, unknown = parser.parse_known_args(argv)
    if unknown and args.command not in ("train", "join", "sim", "sim-worker", "adversary"):
        parser.error(f"unrecognized arguments: {' '.join(unknown)}")
    if args.command is None:
        parser.print_help()
        return 2
    from node.observe.logs import setup_logging

    try:
        if args.command in ("train", "join"):
            overrides = _overrides(args, unknown)
            if args.resume:
                overrides["run.resume"] = True
            if args.command == "join":
                if args.role is not None:
                    overrides["broadcast.role"] = args.role
                if args.follow is not None:
                    overrides["broadcast.follow"] = args.follow
                if args.broker is not None:
                    overrides["swarm.broker"] = args.broker
                file_swarm = (read_toml(args.config).get("swarm") or {}) if args.config else {}
                transport = args.transport or overrides.get("swarm.transport") or file_swarm.get("transport")
                if transport not in ("hivemind", "mqtt", "libp2p"):
                    transport = "mqtt" if args.broker or overrides.get("swarm.broker") or file_swarm.get("broker") else "hivemind"
                overrides["swarm.transport"] = transport
                if args.bootstrap:
                    overrides["swarm.initial_peers"] = list(overrides.get("swarm.initial_peers", [])) + args.bootstrap
                file_run = (read_toml(args.config).get("run") or {}) if args.config else {}
                if "run.dir" not in overrides and "dir" not in file_run:
                    overrides["run.dir"] = JOIN_RUN_DIR  # not train's runs/solo: this node is not alone
            cfg = load_config(args.config, overrides)
            setup_logging(cfg.run.log_level, cfg.run.log_format)
            cfg = _with_profile(cfg, args, overrides)
            if args.command == "join" and cfg.swarm.transport == "mqtt" and (cfg.swarm.initial_peers or args.new_swarm):
                raise ConfigError("--bootstrap and --new-swarm are for the hivemind transport; over mqtt every node "
                                  "meets at the broker (--broker)")
            if args.command == "join" and cfg.swarm.transport in ("hivemind", "libp2p") and not cfg.swarm.initial_peers and not args.new_swarm:
                raise ConfigError("join needs a swarm to join: pass --bootstrap MADDR (the address `swarm-node "
                                  "bootstrap` prints, e.g. /ip4/1.2.3.4/tcp/31337/p2p/QmWyMy...) or set "
                                  "swarm.initial_peers; to start a new swarm with this node as its first peer, "
                                  "pass --new-swarm")
            if args.print_config:
                print(cfg.to_json())
                return 0
            log.info("resolved config: %s", json.dumps(cfg.model_dump(), sort_keys=True))
            summary = asyncio.run(_train(cfg))
            log.info("summary: %s", json.dumps(summary))
            print(json.dumps(summary, indent=2))
            return 130 if summary.get("stopped_early") else 0
        if args.command in ("sim", "sim-worker"):
            return _simulate(args, unknown)
        if args.command == "adversary":
            from node.sim.adversary import ATTACKS, run_adversary

            overrides = _overrides(args, unknown)
            if args.bootstrap:
                overrides["swarm.transport"] = "hivemind"
                overrides["swarm.initial_peers"] = list(overrides.get("swarm.initial_peers", [])) + args.bootstrap
            cfg = load_config(args.config, overrides)
            setup_logging(cfg.run.log_level, cfg.run.log_format)
            attacks = list(ATTACKS) if args.attacks == "all" else [a.strip() for a in args.attacks.split(",")]
            return asyncio.run(run_adversary(cfg, attacks))
        setup_logging()
        if args.command == "bootstrap" and args.transport == "libp2p":
            from node.transport.libp2p.bootstrap import run_libp2p_bootstrap

            return asyncio.run(run_libp2p_bootstrap(
                host=args.host, port=args.port, initial_peers=args.initial_peers, identity=args.identity,
                startup_timeout=args.startup_timeout, announce=args.announce, maddr_file=args.maddr_file))
        if args.command == "bootstrap":
            from node.transport.hivemind.bootstrap import run_bootstrap

            return asyncio.run(run_bootstrap(
                host=args.host, port=args.port, announce=args.announce,
                initial_peers=args.initial_peers, identity=args.identity, relay=not args.no_relay,
                nat=not args.no_nat, startup_timeout=args.startup_timeout, maddr_file=args.maddr_file))
        if args.command == "id":
            from protocol.identity import load_or_create_identity

            print(load_or_create_identity(args.identity or args.run_dir / "identity.pem").peer_id)
            return 0
        if args.command == "build-model":
            from policies.default_model import build_default_model, ensure_default_model

            path = build_default_model(args.out) if args.out else ensure_default_model()
            print(path)
            return 0
        if args.command == "plot":
            from node.errors import NodeError
            from node.observe.plots import plot_folder

            try:
                for path in plot_folder(args.run_dir):
                    print(path)
            except NodeError as e:  # a folder that is not a run: the user's input, not a failure
                raise ConfigError(str(e)) from None
            return 0
    except ConfigError as e:
        _say(f"swarm-node: {e}", logging.ERROR)
        return 2
    except KeyboardInterrupt:
        # Ctrl-C before the node's own handler is installed (loading the model, joining): the
        # start is abandoned; a failed start leaves nothing behind (TrainingNode.create).
        _say("swarm-node: interrupted (Ctrl-C)", logging.WARNING)
        return 130
    except SwarmError as e:
        _say(f"swarm-node: error: {e}", logging.ERROR)
        return 1
    return 2


if __name__ == "__main__":
    sys.exit(main())
