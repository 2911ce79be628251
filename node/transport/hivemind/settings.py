"""The hivemind transport's arguments, read from the node's ``[swarm]`` config.

node/transport/carriers.py calls this when hivemind is selected; it imports nothing of hivemind, so
the table can import it whatever the carrier.
"""

from __future__ import annotations

from typing import Callable

from swarm_node.protocol.identity import Identity

__all__ = ["transport_kwargs"]


def transport_kwargs(sc, ident: Identity, *, p2p_identity_path: str | None,
                     on_retry: Callable[[str], None] | None) -> dict:
    """``HivemindTransport``'s arguments: the DHT's listen, announce and bootstrap addresses, the
    join's retries and NAT traversal (``behind_nat``: node/transport/hivemind/nat.py); ``ident``
    signs its records; ``p2p_identity_path`` is where the daemon keeps its own key (None: a fresh one)."""
    kwargs = dict(initial_peers=sc.initial_peers, host_maddrs=sc.host_maddrs, announce_maddrs=sc.announce_maddrs,
                  startup_timeout=sc.startup_timeout, join_retries=sc.join_retries, join_backoff=sc.join_backoff,
                  use_relay=sc.use_relay, nat_port_map=sc.nat_port_map, behind_nat=sc.behind_nat,
                  round_seconds=sc.round_seconds,
                  signer=ident, on_retry=on_retry)
    if p2p_identity_path:
        kwargs["p2p_identity_path"] = p2p_identity_path
    return kwargs
