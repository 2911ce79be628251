"""``bootstrap``: run the peer that nodes join through (hivemind's DHT peer, or a libp2p host)."""

from __future__ import annotations

import argparse
import asyncio
import hashlib
from pathlib import Path


def run_bootstrap(args: argparse.Namespace, unknown: list[str]) -> int:
    from swarm_node.node.observe.logs import setup_logging
    from swarm_node.node.errors import ConfigError
    from swarm_node.node.run.run_lock import RunLock
    from swarm_node.node.transport.carriers import carrier
    from swarm_node.policies.default_model import default_home

    from swarm_node.node.transport.port_free import check_port_free

    setup_logging()
    check_port_free(args.host, args.port)  # before a daemon binds over it (node/transport/port_free.py)
    swarm_carrier = carrier(args.transport)
    identity = Path(args.identity or default_home() / swarm_carrier.bootstrap_key)
    identity.parent.mkdir(parents=True, exist_ok=True)
    # One bootstrap per key: a second one would run under the first one's peer id, silently. The
    # lock lives in the home folder, named by the key's path: a key may sit in a read-only mount.
    locks = default_home() / "locks"
    try:
        locks.mkdir(parents=True, exist_ok=True)
        key = hashlib.sha256(str(identity.resolve()).encode()).hexdigest()[:16]
        lock = RunLock.hold(locks / f"bootstrap-{key}.lock", lambda holder: (
            f"the bootstrap key {identity} is in use by {holder}: one bootstrap peer per key (its peer id); "
            f"for a second one pass --identity with another file"))
    except OSError as e:
        raise ConfigError(f"cannot lock the bootstrap key {identity} in {locks}: {e.strerror or e}; set "
                          f"SWARM_NODE_HOME to a folder this user can write in") from None
    try:
        serve = swarm_carrier.load_bootstrap()
        # --no-relay and --no-nat are hivemind's daemon's; py-libp2p's host has neither.
        nat = dict(relay=not args.no_relay, nat=not args.no_nat) if swarm_carrier.uses_nat_traversal else {}
        return asyncio.run(serve(
            host=args.host, port=args.port, announce=args.announce, initial_peers=args.initial_peers,
            identity=identity, startup_timeout=args.startup_timeout, maddr_file=args.maddr_file, **nat))
    finally:
        lock.release()
