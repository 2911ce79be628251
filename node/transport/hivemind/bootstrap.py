"""``swarm-node bootstrap``: a long-running DHT peer that other nodes join through.

It trains nothing. It keeps a persistent p2p key so its multiaddr (which embeds the libp2p peer
id) stays valid across restarts, prints the multiaddrs nodes should pass as ``--bootstrap``,
relays for peers behind NAT unless told not to, dials a peer's port back when asked (whether it
is reachable from outside: node/transport/hivemind/dialback.py), refuses DHT records under a peer's subkey that
the peer did not sign (as every node does), logs how many peers it knows every ``report_every``
seconds, and shuts its daemon down cleanly on Ctrl-C or SIGTERM.
"""

from __future__ import annotations

import logging
from pathlib import Path

from swarm_node.node.transport.backoff import JOIN_BACKOFF_S
from swarm_node.node.transport.bootstrap_serve import serve_until_stopped
from swarm_node.node.transport.hivemind.daemon import start_dht_node, stop_dht_node
from swarm_node.node.transport.hivemind.dialback import serve_dialback
from swarm_node.node.transport.hivemind.nat import RELAY_OPTIONS
from swarm_node.node.transport.hivemind.records import bootstrap_validator
from swarm_node.policies.default_model import default_home

log = logging.getLogger(__name__)

__all__ = ["run_bootstrap"]


async def run_bootstrap(*, host: str, port: int, announce: list[str], initial_peers: list[str],
                        identity: Path | None, relay: bool, nat: bool, startup_timeout: float,
                        maddr_file: Path | None = None, report_every: float = 30.0) -> int:
    identity = identity or default_home() / "bootstrap.p2p.key"
    identity.parent.mkdir(parents=True, exist_ok=True)
    node = await start_dht_node(
        initial_peers=initial_peers, host_maddrs=[f"/ip4/{host}/tcp/{port}"], announce_maddrs=announce,
        identity_path=str(identity), startup_timeout=startup_timeout, retries=2, backoff=JOIN_BACKOFF_S,
        use_relay=relay, nat_port_map=nat,
        # It replicates records too: it keeps only owner-signed peer records (as every node does
        # for its swarm's keys) expiring within the hour. It knows no swarm or round: it needs not.
        record_validator=bootstrap_validator(),
        # A relaying bootstrap is public by definition: go-libp2p relays only for a host it believes public.
        p2p_options=RELAY_OPTIONS if relay else None)
    try:
        await serve_dialback(node.p2p)  # `swarm-node doctor` asks whether its port is reachable
        maddrs = [str(m) for m in await node.p2p.get_visible_maddrs()]
        log.info("bootstrap peer %s listening on %s (identity %s)", node.peer_id, maddrs, identity)
        await serve_until_stopped(
            maddrs, what="bootstrap peer", join="swarm-node join --bootstrap", maddr_file=maddr_file,
            report=lambda: f"{len(node.protocol.routing_table.uid_to_peer_id)} peers in the routing table",
            report_every=report_every)
    finally:
        await stop_dht_node(node, timeout=5.0)
    log.info("bootstrap peer stopped")
    return 0
