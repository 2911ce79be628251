"""Transports: how a node's signed envelopes reach its peers.

The node runtime talks only to ``Transport`` (``node/transport/base.py``). Each implementation
lives in its own module and is imported only when selected (``create_transport``): hivemind and
py-libp2p register the same protobuf symbols and cannot share one process, and the MQTT
transport (node/transport/mqtt.py) needs neither.
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
    raise ValueError(f"unknown transport {kind!r}; choose memory, hivemind or mqtt")
