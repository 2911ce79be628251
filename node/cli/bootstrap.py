"""``bootstrap``: run the peer that nodes join through (hivemind's DHT peer, or a libp2p host)."""

from __future__ import annotations

import argparse
import asyncio


def run_bootstrap(args: argparse.Namespace, unknown: list[str]) -> int:
    from node.observe.logs import setup_logging

    setup_logging()
    if args.transport == "libp2p":
        from node.transport.libp2p.bootstrap import run_libp2p_bootstrap

        return asyncio.run(run_libp2p_bootstrap(
            host=args.host, port=args.port, initial_peers=args.initial_peers, identity=args.identity,
            startup_timeout=args.startup_timeout, announce=args.announce, maddr_file=args.maddr_file))
    from node.transport.hivemind.bootstrap import run_bootstrap as run_hivemind_bootstrap

    return asyncio.run(run_hivemind_bootstrap(
        host=args.host, port=args.port, announce=args.announce,
        initial_peers=args.initial_peers, identity=args.identity, relay=not args.no_relay,
        nat=not args.no_nat, startup_timeout=args.startup_timeout, maddr_file=args.maddr_file))
