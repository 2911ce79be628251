"""Transports: how a node's signed envelopes and weight chunks reach its peers.

    base.py           Transport, the interface the node runtime talks to; Delivery, TransportError
    memory.py         in one process through a MemoryHub (unit tests, fast simulation)
    faulty.py         latency, jitter and partitions wrapped around any transport (``sim``)
    inbox.py          what a push carrier delivered, held until the node polls
    ratelimit.py      token buckets: the upload cap, request budgets, the gossip check budget's
    backoff.py        waiting between tries: the back-off schedule and the join retry loop
    addresses.py      addresses that name their peer (``.../p2p/<id>``)
    carrier.py        what the weight broadcast asks of a carrier (one request, one reply)
    directory.py      what a weights directory is (the source's pointer, its followers)
    from_config.py    the selected carrier's arguments from the ``[swarm]`` config
    bootstrap_serve.py  what every bootstrap peer does once up, whatever its carrier
    hivemind/ libp2p/ mqtt/   one folder per carrier: its transport, host or link, broadcast
                      carrier and directory, bootstrap

A carrier is imported only when selected (``create_transport``): hivemind and py-libp2p register
the same protobuf symbols and cannot share one process, and MQTT needs neither. No carrier imports
another.
"""

from node.transport.base import Delivery, Transport, TransportError

__all__ = ["Delivery", "Transport", "TransportError", "create_transport"]


def create_transport(kind: str, **kwargs) -> Transport:
    """A transport by config name (``swarm.transport``), imported lazily."""
    if kind == "memory":
        from node.transport.memory import MemoryTransport

        return MemoryTransport(**kwargs)
    if kind == "hivemind":
        from node.transport.hivemind.transport import HivemindTransport

        return HivemindTransport(**kwargs)
    if kind == "mqtt":
        from node.transport.mqtt.transport import MqttTransport

        return MqttTransport(**kwargs)
    if kind == "libp2p":
        try:
            from node.transport.libp2p.transport import Libp2pTransport
        except ImportError as e:
            raise TransportError(f"the libp2p transport needs py-libp2p: pip install 'swarm-node[libp2p]' ({e})") from None
        return Libp2pTransport(**kwargs)
    raise ValueError(f"unknown transport {kind!r}; choose memory, hivemind, mqtt or libp2p")
