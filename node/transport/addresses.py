"""Addresses that name their peer: ``<where>/p2p/<libp2p peer id>``, the one spelling of them.

A bootstrap peer, a large body's pointer, a weight carrier's address and a peer-exchange reply
all name a host this way (hivemind and py-libp2p alike); the id is what a dial authenticates, the
part before it only where to dial. Pure string work: a multiaddr library still parses what is
dialled. ``dialable_addrs``: the addresses a host gives its peers; ``relayed``: an address that
reaches its host only through a circuit relay (a node behind NAT: node/transport/hivemind/nat.py).
"""

from __future__ import annotations

import ipaddress

__all__ = ["P2P", "CIRCUIT", "names_peer", "peer_id_of", "without_peer", "with_peer", "dialable_addrs", "relayed",
           "peer_address_error", "observed_host", "direct_address", "host_port", "tcp_endpoint"]

P2P = "/p2p/"
CIRCUIT = "/p2p-circuit"


def names_peer(addr: str) -> bool:
    """Whether ``addr`` names a peer (has a ``/p2p/`` part)."""
    return P2P in addr


def peer_id_of(addr: str) -> str | None:
    """The peer id after the last ``/p2p/`` of ``addr``, or None if it names no peer."""
    return addr.rsplit(P2P, 1)[1] if P2P in addr else None


def peer_address_error(addr: str) -> str | None:
    """Why ``addr`` is not an address a node can dial a peer at (None when it is one): a full
    multiaddr ending in ``/p2p/<peer id>``, every part of it well formed, the id a real libp2p
    peer id (a multiaddr library's parse: a placeholder such as ``QmWyMy`` is not one). Said at
    start, before a join retries an address that can never answer."""
    if not (addr.startswith("/") and names_peer(addr)):
        return "not a full multiaddr ending in /p2p/<peer id>"
    if (why := _parse_error(addr)) is None:
        return None
    if _parse_error(without_peer(addr)) is None:  # all but the id parses: the id is what is wrong
        return f"{peer_id_of(addr)} is not a libp2p peer id (the form `swarm-node bootstrap` prints)"
    return f"not a valid multiaddr: {why}"


def _parse_error(addr: str) -> str | None:
    """The multiaddr parser's complaint about ``addr``, or None. py-libp2p's ``multiaddr`` where it
    is installed (the libp2p extra), else hivemind's copy of it (hivemind is always installed)."""
    try:
        from multiaddr import Multiaddr
    except ImportError:
        from hivemind.utils.multiaddr import Multiaddr
    try:
        Multiaddr(addr)
    except Exception as e:  # noqa: BLE001 (the two libraries' parse errors share no base but Exception)
        return str(e).split(" (string:")[0].split("' protocol ", 1)[-1].split("': ", 1)[-1]
    return None


def relayed(addr: str) -> bool:
    """Whether ``addr`` goes through a relay (``<relay>/p2p/<relay id>/p2p-circuit/p2p/<id>``): the
    relay carries every byte and cuts a connection after a small allowance (docs/nat.md). A
    component, not a substring: ``/dns4/p2p-circuit.example.org/...`` is a direct address."""
    return CIRCUIT[1:] in addr.strip("/").split("/")


def without_peer(addr: str) -> str:
    """Where ``addr`` dials: what comes before its first ``/p2p/`` (all of it if none)."""
    return addr.split(P2P)[0]


def with_peer(addr: str, peer_id: object) -> str:
    """``addr`` naming ``peer_id``: unchanged if it names a peer already, else with ``/p2p/<id>``
    added (``with_peer("", id)`` is the bare ``/p2p/<id>``: the peer by id, wherever it is)."""
    return addr if P2P in addr else f"{addr}{P2P}{peer_id}"


_WILDCARDS = ("/ip4/0.0.0.0/", "/ip6/::/")


def dialable_addrs(listening: list[str], announce: list[str], peer_id: str) -> list[str]:
    """The addresses a host gives peers (pointers, peer exchange), each ending in /p2p/<id>:
    ``announce`` if given; else the listen addresses that are not wildcards; else the wildcard
    ones with loopback put in (only a peer on this machine can use those: say ``announce``)."""
    if announce:
        return [with_peer(a, peer_id) for a in announce]
    real = [a for a in listening if not a.startswith(_WILDCARDS)]
    if real:
        return [with_peer(a, peer_id) for a in real]
    return [with_peer(a.replace("/ip4/0.0.0.0/", "/ip4/127.0.0.1/").replace("/ip6/::/", "/ip6/::1/"), peer_id)
            for a in listening]


def observed_host(maddr: str) -> str | None:
    """The IP a direct connection came from (``/ip4/H/tcp/P``, ``/ip6/...``); None for a relayed one."""
    parts = maddr.strip("/").split("/")
    if relayed(maddr) or len(parts) < 2 or parts[0] not in ("ip4", "ip6"):
        return None
    return parts[1]


def direct_address(maddr: str) -> tuple[str, int] | None:
    """``(ip, port)`` of exactly ``/ip4/IP/tcp/PORT`` or ``/ip6/IP/tcp/PORT``, the IP of that
    version; None for anything else (a relay circuit, a name, text a hostile peer made up)."""
    parts = maddr.split("/") if isinstance(maddr, str) else []
    if len(parts) != 5 or parts[0] or parts[1] not in ("ip4", "ip6") or parts[3] != "tcp":
        return None
    try:
        ip = ipaddress.ip_address(parts[2])
    except ValueError:
        return None
    port = parts[4]
    if ip.version != int(parts[1][2]) or getattr(ip, "scope_id", None):  # a zone (%eth0) is free text
        return None
    if not (port.isascii() and port.isdigit() and len(port) <= 5):
        return None
    return (str(ip), int(port)) if int(port) < 65536 else None


def host_port(host: str, port: int) -> str:
    """``host:port``, the host bracketed when it is IPv6 (``[2001:db8::1]:4001``)."""
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def tcp_endpoint(maddr: str) -> tuple[str, int] | None:
    """``(host, port)`` a multiaddr dials over TCP (``/ip4/H/tcp/P/...``, ``/ip6/``, ``/dns/``,
    ``/dns4/``, ``/dns6/``; what follows is ignored); None for anything else (a relay circuit, a
    bare id, another protocol). Lenient: for addresses the user gave, not a peer's text
    (``direct_address``)."""
    parts = without_peer(maddr).strip("/").split("/")
    if len(parts) >= 4 and parts[0] in ("ip4", "ip6", "dns", "dns4", "dns6") and parts[2] == "tcp" and parts[3].isdigit():
        return parts[1], int(parts[3])
    return None
