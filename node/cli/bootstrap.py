"""``bootstrap``: run the peer that nodes join through (hivemind's DHT peer, or a libp2p host)."""

from __future__ import annotations

import argparse
import asyncio


def run_bootstrap(args: argparse.Namespace, unknown: list[str]) -> int:
    from swarm_node.node.observe.logs import setup_logging
    from swarm_node.node.transport.carriers import carrier

    from swarm_node.node.transport.port_free import check_port_free

    setup_logging()
    check_port_free(args.host, args.port)  # before a daemon binds over it (node/transport/port_free.py)
    swarm_carrier = carrier(args.transport)
    serve = swarm_carrier.load_bootstrap()
    # --no-relay and --no-nat are hivemind's daemon's; py-libp2p's host has neither.
    nat = dict(relay=not args.no_relay, nat=not args.no_nat) if swarm_carrier.uses_nat_traversal else {}
    return asyncio.run(serve(
        host=args.host, port=args.port, announce=args.announce, initial_peers=args.initial_peers,
        identity=args.identity, startup_timeout=args.startup_timeout, maddr_file=args.maddr_file, **nat))
