"""The libp2p transport's arguments, read from the node's ``[swarm]`` config.

node/transport/carriers.py calls this when libp2p is selected; it imports nothing of py-libp2p, so
the table can import it whatever the carrier.
"""

from __future__ import annotations

from typing import Callable

from protocol.identity import Identity

__all__ = ["transport_kwargs"]


def transport_kwargs(sc, ident: Identity, *, p2p_identity_path: str | None,
                     on_retry: Callable[[str], None] | None) -> dict:
    """``Libp2pTransport``'s arguments. The node's key is its host's (``p2p_identity_path``, the
    hivemind daemon's key, is not used); the listen, announce and bootstrap addresses are the
    settings hivemind reads too."""
    return dict(identity=ident, listen=sc.host_maddrs, bootstrap=sc.initial_peers,
                announce_addrs=sc.announce_maddrs, round_seconds=sc.round_seconds, startup_timeout=sc.startup_timeout,
                join_retries=sc.join_retries, join_backoff=sc.join_backoff, on_retry=on_retry)
