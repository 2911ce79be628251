"""``swarm-node bootstrap --transport libp2p``: a long-running py-libp2p host that nodes of
libp2p swarms join through.

It trains nothing and joins no swarm's topics: it answers peer exchange
(node/transport/libp2p/host.py), so a node that dials it learns the addresses of the others and
connects to them, and their gossip meshes form among themselves. Its key is a node key file
(protocol/identity.py, default $SWARM_NODE_HOME/bootstrap.libp2p.pem), so its multiaddr, which
ends in the key's libp2p peer id, stays the same across restarts. It needs no daemon and never
imports hivemind (the two cannot share a process).
"""

from __future__ import annotations

import logging
from pathlib import Path

from swarm_node.node.transport.bootstrap_serve import serve_until_stopped
from swarm_node.node.transport.libp2p.host import Libp2pHost
from swarm_node.policies.default_model import default_home
from swarm_node.protocol.identity import load_or_create_identity

log = logging.getLogger(__name__)

__all__ = ["run_libp2p_bootstrap"]


async def run_libp2p_bootstrap(*, host: str, port: int, initial_peers: list[str], identity: Path | None,
                               startup_timeout: float, announce: list[str] | None = None,
                               maddr_file: Path | None = None, report_every: float = 30.0) -> int:
    identity = identity or default_home() / "bootstrap.libp2p.pem"
    identity.parent.mkdir(parents=True, exist_ok=True)
    node = Libp2pHost(load_or_create_identity(identity), [f"/ip4/{host}/tcp/{port}"], initial_peers,
                      announce=announce, target_peers=64, name="libp2p-bootstrap")
    await node.start(startup_timeout)
    try:
        if initial_peers:
            await node.bridge.call(node.connect_bootstrap)
        log.info("libp2p bootstrap peer %s listening on %s (key %s)", node.peer_id, node.addrs, identity)
        if host in ("0.0.0.0", "::") and not announce:
            log.warning("listening on all interfaces, printing loopback addresses: nodes on other machines need "
                        "this machine's address, --announce /ip4/<address>/tcp/%d", port)
        await serve_until_stopped(
            node.addrs, what="libp2p bootstrap peer", join="swarm-node join --transport libp2p --bootstrap",
            maddr_file=maddr_file, report=lambda: f"{len(node.connected())} peers connected",
            report_every=report_every)
    finally:
        await node.close()
    log.info("libp2p bootstrap peer stopped")
    return 0
