"""``adversary``: join a swarm as a malicious peer that publishes hostile messages (node/sim/adversary)."""

from __future__ import annotations

import argparse
import asyncio

from swarm_node.node.cli.flags import overrides as config_overrides
from swarm_node.node.config.config import load_config
from swarm_node.node.transport.carriers import the


def run_adversary(args: argparse.Namespace, unknown: list[str]) -> int:
    from swarm_node.node.observe.logs import setup_logging
    from swarm_node.node.sim.adversary import ATTACKS, run_adversary as adversary

    overrides = config_overrides(args, unknown)
    if args.bootstrap:
        overrides.setdefault("swarm.transport", the(lambda c: c.join_default).name)  # the public swarm's unless named
        overrides["swarm.initial_peers"] = list(overrides.get("swarm.initial_peers", [])) + args.bootstrap
    cfg = load_config(args.config, overrides)
    setup_logging(cfg.run.log_level, cfg.run.log_format)
    attacks = list(ATTACKS) if args.attacks == "all" else [a.strip() for a in args.attacks.split(",")]
    return asyncio.run(adversary(cfg, attacks))
