"""``swarm-node bootstrap --transport libp2p``: a long-running py-libp2p host that nodes of
libp2p swarms join through.

It trains nothing and joins no swarm's topics: it answers peer exchange
(node/transport/libp2p_host.py), so a node that dials it learns the addresses of the others and
connects to them, and their gossip meshes form among themselves. Its key is a node key file
(protocol/identity.py, default $SWARM_NODE_HOME/bootstrap.libp2p.pem), so its multiaddr, which
ends in the key's libp2p peer id, stays the same across restarts. It needs no daemon and never
imports hivemind (the two cannot share a process).
"""

from __future__ import annotations

import asyncio
import logging
import signal
from pathlib import Path

from node.transport.libp2p_host import Libp2pHost
from policies.default_model import default_home
from protocol.identity import load_or_create_identity

log = logging.getLogger(__name__)

__all__ = ["run_libp2p_bootstrap"]


async def run_libp2p_bootstrap(*, host: str, port: int, initial_peers: list[str], identity: Path | None,
                               startup_timeout: float, maddr_file: Path | None = None,
                               report_every: float = 30.0) -> int:
    identity = identity or default_home() / "bootstrap.libp2p.pem"
    identity.parent.mkdir(parents=True, exist_ok=True)
    node = Libp2pHost(load_or_create_identity(identity), [f"/ip4/{host}/tcp/{port}"], initial_peers,
                      target_peers=64, name="libp2p-bootstrap")
    await node.start(startup_timeout)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    try:
        if initial_peers:
            await node.bridge.call(node.connect_bootstrap)
        maddrs = node.addrs
        if maddr_file is not None:
            tmp = maddr_file.with_suffix(".tmp")
            tmp.write_text("\n".join(maddrs) + "\n")
            tmp.replace(maddr_file)  # readers never see half a file
        print("libp2p bootstrap peer is up; nodes join with:", flush=True)
        for m in maddrs:
            print(f"  swarm-node join --transport libp2p --bootstrap {m}", flush=True)
        log.info("libp2p bootstrap peer %s listening on %s (key %s)", node.peer_id, maddrs, identity)
        while not stop.is_set():
            try:
                await asyncio.wait_for(stop.wait(), timeout=report_every)
            except asyncio.TimeoutError:
                log.info("libp2p bootstrap peer: %d peers connected", len(node.connected()))
    finally:
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.remove_signal_handler(sig)
        await node.close()
    log.info("libp2p bootstrap peer stopped")
    return 0
