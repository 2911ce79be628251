"""The libp2p transport's arguments, read from the node's ``[swarm]`` config.

node/transport/carriers.py calls this when libp2p is selected; it imports nothing of py-libp2p, so
the table can import it whatever the carrier.
"""

from __future__ import annotations

from typing import Callable

from swarm_node.node.errors import ConfigError
from swarm_node.protocol.identity import Identity

__all__ = ["transport_kwargs", "NO_RELAY", "UNDIALABLE"]

# What a node behind NAT must provide over this carrier (docs/nat.md): swarm-node's py-libp2p host
# runs no circuit relay and no hole punching, so each node must be dialable itself.
OPEN_A_PORT = ("forward a TCP port on the router to this node's --swarm.host_maddrs port (e.g. "
               "'[\"/ip4/0.0.0.0/tcp/4001\"]') and announce it (--swarm.announce_maddrs "
               "'[\"/ip4/PUBLIC_IP/tcp/4001\"]'), or use --transport mqtt (outbound connections only) or "
               "hivemind with --swarm.behind_nat true (its bootstrap peers relay)")
NO_RELAY = "swarm.behind_nat: the libp2p carrier has no relay; behind NAT, " + OPEN_A_PORT
UNDIALABLE = ("could not dial {peer} at {addr}, which peer exchange named: it, or this node, is behind NAT "
              "or a firewall, and the libp2p carrier has no relay. Each node behind NAT must " + OPEN_A_PORT)


def transport_kwargs(sc, ident: Identity, *, p2p_identity_path: str | None,
                     on_retry: Callable[[str], None] | None) -> dict:
    """``Libp2pTransport``'s arguments. The node's key is its host's (``p2p_identity_path``, the
    hivemind daemon's key, is not used); the listen, announce and bootstrap addresses are the
    settings hivemind reads too. ``swarm.behind_nat`` is refused: this carrier has no relay."""
    if sc.behind_nat:
        raise ConfigError(NO_RELAY)
    return dict(identity=ident, listen=sc.host_maddrs, bootstrap=sc.initial_peers,
                announce_addrs=sc.announce_maddrs, round_seconds=sc.round_seconds, startup_timeout=sc.startup_timeout,
                join_retries=sc.join_retries, join_backoff=sc.join_backoff, on_retry=on_retry)
