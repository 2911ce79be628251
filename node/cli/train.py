"""``train`` and ``join``: run one training node, solo or in a swarm, until it finishes or is stopped.

``join`` is ``train`` with a swarm: it adds its own flags to the config (role, broker, bootstrap
peers), names the transport it infers (``join_transport``), and refuses a swarm it cannot join.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
from pathlib import Path
from typing import Callable

from swarm_node.node.cli.flags import flat_keys, overrides as config_overrides
from swarm_node.node.cli.parser import JOIN_RUN_DIR
from swarm_node.node.errors import ConfigError
from swarm_node.node.config.config import read_toml
from swarm_node.node.config.resume_config import load_run_config
from swarm_node.node.transport.carriers import CARRIERS, carrier, carrier_of_address

log = logging.getLogger("swarm_node")

JOIN_TRANSPORTS = tuple(name for name, c in CARRIERS.items() if not c.in_process)  # hivemind, mqtt, libp2p


def join_transport(flag: str | None, overrides: dict, file_swarm: dict) -> str:
    """The transport ``join`` uses: the first one named (``--transport`` as ``flag``, then
    ``--swarm.transport`` in ``overrides``, then the config file's ``[swarm] transport``) if join
    can use it; else mqtt when a broker is named (``--broker`` or ``--swarm.broker`` in
    ``overrides``, or the file's ``broker``), else hivemind."""
    transport = flag or overrides.get("swarm.transport") or file_swarm.get("transport")
    if transport in JOIN_TRANSPORTS:
        return transport
    if overrides.get("swarm.broker") or file_swarm.get("broker"):
        return next(name for name in JOIN_TRANSPORTS if CARRIERS[name].needs_broker)
    return next(name for name in JOIN_TRANSPORTS if CARRIERS[name].join_default)


def run_train(args: argparse.Namespace, unknown: list[str]) -> int:
    return _run(args, _common_overrides(args, unknown))


def run_join(args: argparse.Namespace, unknown: list[str]) -> int:
    return _run(args, join_overrides(args, unknown), check=lambda cfg: check_swarm(cfg, args.new_swarm))


def join_overrides(args: argparse.Namespace, unknown: list[str]) -> dict:
    """The config ``join`` runs with: its flags' overrides, its own flags (role, follow, broker,
    bootstrap) as config keys, the transport it infers, its run folder. ``doctor`` reads the same."""
    overrides = _common_overrides(args, unknown)
    for flag, key in (("role", "broadcast.role"), ("follow", "broadcast.follow"), ("broker", "swarm.broker")):
        if getattr(args, flag, None) is not None:  # (the broker before join_transport: a broker implies mqtt)
            overrides[key] = getattr(args, flag)
    file = read_toml(args.config) if args.config else {}
    overrides["swarm.transport"] = join_transport(args.transport, overrides, file.get("swarm") or {})
    if args.bootstrap:
        overrides["swarm.initial_peers"] = list(overrides.get("swarm.initial_peers", [])) + args.bootstrap
    if "run.dir" not in overrides and "dir" not in (file.get("run") or {}):
        overrides["run.dir"] = JOIN_RUN_DIR  # not train's runs/solo: this node is not alone
    return overrides


def _common_overrides(args: argparse.Namespace, unknown: list[str]) -> dict:
    overrides = config_overrides(args, unknown)
    if getattr(args, "resume", False):
        overrides["run.resume"] = True
    return overrides


def _check_follow(by_flag: bool, overrides: dict, file_broadcast: dict) -> None:
    """A learner to follow (``--follow``, ``--broadcast.follow`` or the config file's) that is not a
    node id is named as such, not reported as if none were given."""
    from swarm_node.protocol.identity import PEER_ID_RE

    flag = ("--follow" if by_flag else "--broadcast.follow" if "broadcast.follow" in overrides
            else "broadcast.follow (config file)")
    value = overrides.get("broadcast.follow", file_broadcast.get("follow"))
    if isinstance(value, str) and value and not PEER_ID_RE.fullmatch(value):
        raise ConfigError(f"{flag} {value!r} is not a node id: a node id is sn1 followed by 32 characters of "
                          f"a-z and 2-7 (35 in all, e.g. sn1{'a' * 32}), as the learner logs it at start "
                          f"(\"peer id sn1...\") and `swarm-node id --run-dir <its run folder>` prints it")


def check_swarm(cfg, new_swarm: bool) -> None:
    """Refuse a join that names no swarm to join, bootstrap peers where there are none, or a
    bootstrap peer of another carrier (its peer id tells: node/transport/carriers.py)."""
    c = carrier(cfg.swarm.transport)  # join names one (join_transport)
    if c.needs_broker and (cfg.swarm.initial_peers or new_swarm):
        raise ConfigError(f"--bootstrap and --new-swarm are for the hivemind transport; over {c.name} every node "
                          "meets at the broker (--broker)")
    for addr in cfg.swarm.initial_peers:
        other = carrier_of_address(addr)
        if other is not None and other is not c:
            raise ConfigError(f"--bootstrap {addr} is a {other.name} peer (a peer id starting {other.peer_id_prefix} "
                              f"is {other.name}'s), and this node joins over {c.name}: pass --transport {other.name}")
    if c.joins_through_bootstrap and not cfg.swarm.initial_peers and not new_swarm:
        raise ConfigError("join needs a swarm to join: pass --bootstrap MADDR (the address `swarm-node "
                          "bootstrap` prints, e.g. /ip4/1.2.3.4/tcp/31337/p2p/QmWyMy...) or set "
                          "swarm.initial_peers; to start a new swarm with this node as its first peer, "
                          "pass --new-swarm")


def _run(args: argparse.Namespace, overrides: dict, check: Callable[[object], None] | None = None) -> int:
    from swarm_node.node.observe.logs import setup_logging

    _check_follow(getattr(args, "follow", None) is not None, overrides,
                  (read_toml(args.config).get("broadcast") or {}) if args.config else {})
    cfg, changed = load_run_config(args.config, overrides)  # a resume: the run's own config under these
    setup_logging(cfg.run.log_level, cfg.run.log_format)
    if cfg.run.resume and (Path(cfg.run.dir) / "config.json").is_file():
        log.info("resuming %s with its saved config%s", cfg.run.dir,
                 "; this start changes " + "; ".join(changed) if changed else " (nothing changed)")
    elif cfg.run.resume and not (Path(cfg.run.dir) / "checkpoints").is_dir():
        # A typo in --run.dir must not pass as a resume (a kill before the start saved: a warning too).
        log.warning("--resume (run.resume): %s holds no run to resume (%s): starting a new run there; check "
                    "--run.dir if you meant to continue one", cfg.run.dir,
                    "no config.json" if Path(cfg.run.dir).is_dir() else "the folder does not exist")
    cfg = _with_profile(cfg, args, overrides)
    if check is not None:
        check(cfg)
    if args.print_config:
        print(cfg.to_json())
        return 0
    log.info("resolved config: %s", json.dumps(cfg.model_dump(), sort_keys=True))
    summary = asyncio.run(_train(cfg))
    log.info("summary: %s", json.dumps(summary))
    print(json.dumps(summary, indent=2))
    _warn_if_alone(cfg, summary)
    return 130 if summary.get("stopped_early") else 0


def _warn_if_alone(cfg, summary: dict) -> None:
    """The last word of a swarm node that heard no peer of its swarm at all (node/run/swarm_watch.py)."""
    sw = summary.get("swarm")
    if sw and summary.get("steps") and not sw.get("peers_heard") and not sw.get("peers_alive"):
        log.warning("heard no peer of swarm %r in %d steps: are the peers using another --swarm.name? "
                    "(this node's is %r)", cfg.swarm.name, summary["steps"], cfg.swarm.name)


def _with_profile(cfg, args: argparse.Namespace, overrides: dict):
    """The config with the memory profile's settings where the user set none (node/gpu/select.py)."""
    from swarm_node.node.gpu.select import check_settings_fit, describe, plan_profile, profile_overrides

    plan = plan_profile(cfg, args.profile)
    if plan is None:
        return cfg
    for line in describe(plan):
        log.info("%s", line)
    explicit = set(overrides) | (flat_keys(read_toml(args.config)) if args.config else set())
    chosen = {k: v for k, v in profile_overrides(plan).items() if k not in explicit}
    cfg, _ = load_run_config(args.config, {**chosen, **overrides})
    warning = check_settings_fit(plan, cfg)
    if warning:
        log.warning("%s", warning)
    return cfg


async def _train(cfg) -> dict:
    from transformers.utils import logging as hf_logging

    from swarm_node.node.run.trainer import TrainingNode

    hf_logging.disable_progress_bar()  # the node's own progress display is the one to read

    node = await TrainingNode.create(cfg)
    try:
        return await node.run()
    finally:
        await node.close()
