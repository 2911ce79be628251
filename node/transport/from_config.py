"""The node's transport, built from its ``[swarm]`` config: one place that turns the settings
into the selected carrier's arguments (the training node and the adversary both join this way).

Only the selected carrier's module is imported (``create_transport``): hivemind and py-libp2p
cannot share a process.
"""

from __future__ import annotations

from typing import Callable

from node.transport import Transport, create_transport
from node.transport.mqtt.url import parse_broker_url, resolve_password
from protocol.identity import Identity

__all__ = ["transport_from_config"]


def transport_from_config(sc, ident: Identity, *, p2p_identity_path: str | None = None,
                          on_retry: Callable[[str], None] | None = None) -> Transport:
    """The transport ``sc.transport`` names, not started. ``sc``: the node's ``SwarmConfig``;
    ``ident``: its key (libp2p's host key, hivemind's record signer); ``p2p_identity_path``:
    where hivemind's daemon keeps its own key (None: a fresh one); ``on_retry`` hears each failed
    join attempt."""
    kwargs: dict = {}
    if sc.transport == "hivemind":
        kwargs = dict(initial_peers=sc.initial_peers, host_maddrs=sc.host_maddrs, announce_maddrs=sc.announce_maddrs,
                      startup_timeout=sc.startup_timeout, join_retries=sc.join_retries, join_backoff=sc.join_backoff,
                      use_relay=sc.use_relay, nat_port_map=sc.nat_port_map, round_seconds=sc.round_seconds,
                      signer=ident, on_retry=on_retry)
        if p2p_identity_path:
            kwargs["p2p_identity_path"] = p2p_identity_path
    elif sc.transport == "mqtt":
        # The password is resolved here (a file or $SWARM_NODE_MQTT_PASSWORD), never from the URL.
        broker = parse_broker_url(sc.broker, password=resolve_password(sc.broker_password_file),
                                  ca_file=sc.broker_ca_file, cert_file=sc.broker_cert_file,
                                  key_file=sc.broker_key_file)
        kwargs = dict(broker=broker, connect_timeout=sc.startup_timeout, join_retries=sc.join_retries,
                      join_backoff=sc.join_backoff, on_retry=on_retry)
    elif sc.transport == "libp2p":
        # The node's key is its host's; hivemind's listen, announce and bootstrap settings are its own.
        kwargs = dict(identity=ident, listen=sc.host_maddrs, bootstrap=sc.initial_peers,
                      announce_addrs=sc.announce_maddrs, round_seconds=sc.round_seconds, startup_timeout=sc.startup_timeout,
                      join_retries=sc.join_retries, join_backoff=sc.join_backoff, on_retry=on_retry)
    return create_transport(sc.transport, swarm=sc.name, publisher=ident.peer_id, **kwargs)
