"""What each carrier is: the one table the node, the simulator and the CLI ask, instead of
comparing ``swarm.transport`` names.

A ``Carrier`` holds the traits those callers decide by (whether its swarm runs in one process,
joins through a bootstrap peer or meets at a broker, has a DHT index to attack, ...), how its
transport's arguments come from the ``[swarm]`` config (each carrier folder's ``settings.py``), and
loaders for its transport class and bootstrap peer. The loaders import on call: hivemind and
py-libp2p register the same protobuf symbols and cannot share one process, so importing this table
imports neither.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Awaitable, Callable

from swarm_node.node.transport.addresses import peer_id_of
from swarm_node.node.transport.base import Transport, TransportError
from swarm_node.node.transport.hivemind import settings as hivemind_settings
from swarm_node.node.transport.libp2p import settings as libp2p_settings
from swarm_node.node.transport.mqtt import settings as mqtt_settings

__all__ = ["CARRIERS", "Carrier", "carrier", "carrier_of_address", "broker_carrier", "names", "the"]

# (sc, ident, *, p2p_identity_path, on_retry) -> the transport's keyword arguments
TransportKwargs = Callable[..., dict]
# ``swarm-node bootstrap``'s options, as keywords -> its exit status
BootstrapServer = Callable[..., Awaitable[int]]


@dataclass(frozen=True)
class Carrier:
    """One carrier: its name in ``swarm.transport``, how to build its transport, and its traits."""

    name: str
    load_transport: Callable[[], type[Transport]]  # its transport class, imported when called
    transport_kwargs: TransportKwargs  # that class's arguments from the [swarm] config
    # Every node in one process, meeting at one hub: no faults, no roles, one log (memory).
    in_process: bool = False
    # Peer to peer: a joining node names initial peers, or starts a new swarm (hivemind, libp2p).
    joins_through_bootstrap: bool = False
    # Every node meets at swarm.broker; initial peers mean nothing (mqtt).
    needs_broker: bool = False
    # Rollouts are found through a DHT index: the raw and sybil attacks write into it (hivemind).
    has_dht_index: bool = False
    # Reads swarm.use_relay and swarm.nat_port_map, and its bootstrap peer --no-relay, --no-nat (hivemind).
    uses_nat_traversal: bool = False
    # ``join``'s carrier when neither a carrier nor a broker is named: the public swarm (hivemind).
    join_default: bool = False
    # What a joining node starts before it contacts its initial peers (status.json).
    local_peer: str = ""
    # The file name of its bootstrap peer's key.
    bootstrap_key: str = ""
    # Its bootstrap peer's run function (``swarm-node bootstrap``), imported when called.
    load_bootstrap: Callable[[], BootstrapServer] | None = None
    # How its peers' libp2p ids begin, in the addresses they give (hivemind's daemon makes RSA keys:
    # Qm...; the libp2p host is the node's Ed25519 key: 12D3KooW...): tells one carrier's
    # bootstrap address from another's before dialling it.
    peer_id_prefix: str = ""
    # (a broker carrier) ``swarm.broker`` as shown, ValueError for one it cannot use: the config
    # checks it at load; start-up names it.
    broker_shown: Callable[[str], str] | None = None
    broker_endpoint: Callable[[str], tuple[str, int]] | None = None  # (host, port) it dials: the doctor's
    # A node listens for its peers (False: every node dials out to the broker, mqtt): the doctor's
    # address, NAT and reachability checks apply.
    listens: bool = True
    # What the carrier tells the node of its NAT status (the doctor's nat line).
    nat_report: str = ""
    # The doctor's dial-back request (a peer dials this node's port back), imported when called.
    load_dialback: Callable[[], object] | None = None


def _memory() -> type[Transport]:
    from swarm_node.node.transport.memory import MemoryTransport

    return MemoryTransport


def _memory_kwargs(sc, ident, *, p2p_identity_path: str | None, on_retry) -> dict:
    return {}  # the process's hub: nothing to read from [swarm] but its name


def _hivemind() -> type[Transport]:
    from swarm_node.node.transport.hivemind.transport import HivemindTransport

    return HivemindTransport


def _hivemind_bootstrap() -> BootstrapServer:
    from swarm_node.node.transport.hivemind.bootstrap import run_bootstrap

    return run_bootstrap


def _hivemind_dialback():
    from swarm_node.node.transport.hivemind import dialback

    return dialback


def _mqtt() -> type[Transport]:
    from swarm_node.node.transport.mqtt.transport import MqttTransport

    return MqttTransport


def _libp2p() -> type[Transport]:
    try:
        from swarm_node.node.transport.libp2p.transport import Libp2pTransport
    except ImportError as e:  # an optional extra
        raise TransportError(f"the libp2p transport needs py-libp2p: pip install 'swarm-node[libp2p]' ({e})") from None
    return Libp2pTransport


def _libp2p_bootstrap() -> BootstrapServer:
    from swarm_node.node.transport.libp2p.bootstrap import run_libp2p_bootstrap

    return run_libp2p_bootstrap


CARRIERS: dict[str, Carrier] = {c.name: c for c in (
    Carrier(name="memory", load_transport=_memory, transport_kwargs=_memory_kwargs, in_process=True),
    Carrier(name="hivemind", load_transport=_hivemind, transport_kwargs=hivemind_settings.transport_kwargs,
            joins_through_bootstrap=True, has_dht_index=True, uses_nat_traversal=True, join_default=True,
            local_peer="the p2p daemon", bootstrap_key="bootstrap.p2p.key", load_bootstrap=_hivemind_bootstrap,
            peer_id_prefix="Qm", nat_report="hivemind's p2pd does not report its AutoNAT result to the node",
            load_dialback=_hivemind_dialback),
    Carrier(name="mqtt", load_transport=_mqtt, transport_kwargs=mqtt_settings.transport_kwargs, needs_broker=True,
            broker_shown=mqtt_settings.broker_shown, broker_endpoint=mqtt_settings.broker_endpoint, listens=False),
    Carrier(name="libp2p", load_transport=_libp2p, transport_kwargs=libp2p_settings.transport_kwargs,
            joins_through_bootstrap=True, local_peer="the libp2p host", bootstrap_key="bootstrap.libp2p.pem",
            load_bootstrap=_libp2p_bootstrap, peer_id_prefix="12D3KooW", nat_report="py-libp2p's host runs no AutoNAT"),
)}


def carrier(name: str) -> Carrier:
    """The carrier ``swarm.transport`` names; ValueError for any other name."""
    try:
        return CARRIERS[name]
    except KeyError:
        *rest, last = CARRIERS
        raise ValueError(f"unknown transport {name!r}; choose {', '.join(rest)} or {last}") from None


def names(pred: Callable[[Carrier], bool] = lambda c: True) -> list[str]:
    """The carriers' names for which ``pred`` holds, in the table's order (the CLI's choices)."""
    return [c.name for c in CARRIERS.values() if pred(c)]


def the(pred: Callable[[Carrier], bool]) -> Carrier:
    """The one carrier with a trait: ``the(lambda c: c.join_default)``, ``the(lambda c: c.in_process)``."""
    found = [c for c in CARRIERS.values() if pred(c)]
    if len(found) != 1:
        raise LookupError(f"{len(found)} carriers have that trait ({', '.join(c.name for c in found)}): the caller "
                          f"must choose among them")
    return found[0]


def broker_carrier() -> Carrier:
    """The carrier whose nodes meet at ``swarm.broker``: it reads that setting."""
    return the(lambda c: c.needs_broker)


def carrier_of_address(addr: str) -> Carrier | None:
    """The carrier whose peers' ids look like the one ``addr`` names (``.../p2p/<id>``), or None."""
    peer = peer_id_of(addr) or ""
    return next((c for c in CARRIERS.values() if c.peer_id_prefix and peer.startswith(c.peer_id_prefix)), None)
