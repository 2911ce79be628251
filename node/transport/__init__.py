"""Transports: how a node's signed envelopes reach its peers.

The node runtime talks only to ``Transport`` (``node/transport/base.py``). Each implementation
lives in its own module and is imported only when selected (``create_transport``): hivemind and
py-libp2p register the same protobuf symbols and cannot share one process (a node runs one of
them: node/transport/hivemind_dht.py or node/transport/libp2p.py), and the MQTT transport
(node/transport/mqtt.py) needs neither.
"""

from node.transport.base import Delivery, Transport, TransportError

__all__ = ["Delivery", "Transport", "TransportError", "create_transport"]


def create_transport(kind: str, **kwargs) -> Transport:
    """A transport by config name (``swarm.transport``), imported lazily."""
    if kind == "memory":
        from node.transport.memory import MemoryTransport

        return MemoryTransport(**kwargs)
    if kind == "hivemind":
        from node.transport.hivemind_dht import HivemindTransport

        return HivemindTransport(**kwargs)
    if kind == "mqtt":
        from node.transport.mqtt import MqttTransport

        return MqttTransport(**kwargs)
    if kind == "libp2p":
        try:
            from node.transport.libp2p import Libp2pTransport
        except ImportError as e:
            raise TransportError(f"the libp2p transport needs py-libp2p: pip install 'swarm-node[libp2p]' ({e})") from None
        return Libp2pTransport(**kwargs)
    raise ValueError(f"unknown transport {kind!r}; choose memory, hivemind, mqtt or libp2p")
