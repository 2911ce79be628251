"""The MQTT transport's arguments, read from the node's ``[swarm]`` config.

node/transport/carriers.py calls this when mqtt is selected.
"""

from __future__ import annotations

from typing import Callable

from swarm_node.node.transport.mqtt.url import parse_broker_url, resolve_password
from swarm_node.protocol.identity import Identity

__all__ = ["transport_kwargs", "broker_shown", "broker_endpoint"]


def broker_endpoint(url: str) -> tuple[str, int]:
    """``(host, port)`` the broker URL dials (the scheme's default port when it names none);
    ValueError for a URL it cannot use."""
    b = parse_broker_url(url)
    return b.host, b.port


def broker_shown(url: str) -> str:
    """``swarm.broker`` as the node shows it (no credentials); ValueError naming what is wrong
    with it (the config checks it at load, not at join)."""
    return parse_broker_url(url).url


def transport_kwargs(sc, ident: Identity, *, p2p_identity_path: str | None,
                     on_retry: Callable[[str], None] | None) -> dict:
    """``MqttTransport``'s arguments: the broker and its credentials, the join's retries
    (``ident`` and ``p2p_identity_path`` are not used)."""
    # The password is resolved here (a file or $SWARM_NODE_MQTT_PASSWORD), never from the URL.
    broker = parse_broker_url(sc.broker, password=resolve_password(sc.broker_password_file),
                              ca_file=sc.broker_ca_file, cert_file=sc.broker_cert_file,
                              key_file=sc.broker_key_file)
    return dict(broker=broker, connect_timeout=sc.startup_timeout, join_retries=sc.join_retries,
                join_backoff=sc.join_backoff, on_retry=on_retry)
