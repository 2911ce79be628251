"""The node's transport, built from its ``[swarm]`` config: one place that turns the settings
into the selected carrier's arguments (the training node and the adversary both join this way).

Each carrier reads its own settings (its folder's ``settings.py``, through node/transport/carriers.py);
only the selected carrier's transport module is imported: hivemind and py-libp2p cannot share a process.
"""

from __future__ import annotations

from typing import Callable

from swarm_node.node.transport import Transport, create_transport
from swarm_node.node.transport.carriers import carrier
from swarm_node.protocol.identity import Identity

__all__ = ["transport_from_config"]


def transport_from_config(sc, ident: Identity, *, p2p_identity_path: str | None = None,
                          on_retry: Callable[[str], None] | None = None) -> Transport:
    """The transport ``sc.transport`` names, not started. ``sc``: the node's ``SwarmConfig``;
    ``ident``: its key (libp2p's host key, hivemind's record signer); ``p2p_identity_path``:
    where hivemind's daemon keeps its own key (None: a fresh one); ``on_retry`` hears each failed
    join attempt."""
    kwargs = carrier(sc.transport).transport_kwargs(sc, ident, p2p_identity_path=p2p_identity_path, on_retry=on_retry)
    return create_transport(sc.transport, swarm=sc.name, publisher=ident.peer_id, **kwargs)
