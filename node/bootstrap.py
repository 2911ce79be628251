"""``swarm-node bootstrap``: a long-running DHT peer that other nodes join through.

It trains nothing. It keeps a persistent p2p key so its multiaddr (which embeds the libp2p peer
id) stays valid across restarts, prints the multiaddrs nodes should pass as ``--bootstrap``,
relays for peers behind NAT unless told not to, refuses DHT records under a peer's subkey that
the peer did not sign (as every node does), logs how many peers it knows every ``report_every``
seconds, and shuts its daemon down cleanly on Ctrl-C or SIGTERM.
"""

from __future__ import annotations

import asyncio
import logging
import signal
from pathlib import Path

from node.transport.dht_records import bootstrap_validator
from node.transport.hivemind_dht import start_dht_node, stop_dht_node
from policies.default_model import default_home

log = logging.getLogger(__name__)

__all__ = ["run_bootstrap"]


async def run_bootstrap(*, host: str, port: int, announce: list[str], initial_peers: list[str],
                        identity: Path | None, relay: bool, nat: bool, startup_timeout: float,
                        maddr_file: Path | None = None, report_every: float = 30.0) -> int:
    identity = identity or default_home() / "bootstrap.p2p.key"
    identity.parent.mkdir(parents=True, exist_ok=True)
    node = await start_dht_node(
        initial_peers=initial_peers, host_maddrs=[f"/ip4/{host}/tcp/{port}"], announce_maddrs=announce,
        identity_path=str(identity), startup_timeout=startup_timeout, retries=2, backoff=2.0,
        use_relay=relay, nat_port_map=nat,
        # It replicates records too: it keeps only owner-signed peer records (as every node does
        # for its swarm's keys) expiring within the hour. It knows no swarm or round: it needs not.
        record_validator=bootstrap_validator())
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    try:
        maddrs = [str(m) for m in await node.p2p.get_visible_maddrs()]
        if maddr_file is not None:
            tmp = maddr_file.with_suffix(".tmp")
            tmp.write_text("\n".join(maddrs) + "\n")
            tmp.replace(maddr_file)  # readers never see half a file
        print("bootstrap peer is up; nodes join with:", flush=True)
        for m in maddrs:
            print(f"  swarm-node join --bootstrap {m}", flush=True)
        log.info("bootstrap peer %s listening on %s (identity %s)", node.peer_id, maddrs, identity)
        while not stop.is_set():
            try:
                await asyncio.wait_for(stop.wait(), timeout=report_every)
            except asyncio.TimeoutError:
                log.info("bootstrap peer: %d peers in the routing table",
                         len(node.protocol.routing_table.uid_to_peer_id))
    finally:
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.remove_signal_handler(sig)
        await stop_dht_node(node, timeout=5.0)
    log.info("bootstrap peer stopped")
    return 0
