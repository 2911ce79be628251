"""Behind NAT over hivemind: the p2p daemon's options that make a node which cannot be dialled
reachable through its bootstrap peers' circuit relay, the bootstrap's side of it, and the hint a
node logs when it cannot dial a peer (docs/nat.md says what each carrier needs).

hivemind's p2pd (go-libp2p, circuit relay v2) can do it, but not by default:

- **The relay** (``swarm-node bootstrap``, relaying unless ``--no-relay``) must know it is public:
  go-libp2p starts its relay service only once AutoNAT says so, which needs several other peers
  to dial it back; a bootstrap is public by definition, so its reachability is forced public.
- **A node behind NAT** (``swarm.behind_nat``) keeps a reservation on its bootstrap peers (autorelay
  with them as trusted relays, its reachability forced private) and announces its circuit addresses
  through them, ``<bootstrap>/p2p-circuit``: a peer that wants its rollouts or weights dials it
  there, through the relay. p2pd announces no circuit address of its own accord (seen with
  hivemind 1.1.12's p2pd), and its autorelay waits for four relay candidates, or three minutes,
  before it reserves a slot at all (measured: docs/nat.md).

p2pd has no hole punching (no DCUtR): every byte between two NATed peers goes through the relay.
"""

from __future__ import annotations

from swarm_node.node.transport.base import TransportError

__all__ = ["behind_nat_options", "RELAY_OPTIONS", "dial_failure_hint"]

# The bootstrap peer's daemon, when it relays: public, so go-libp2p runs its relay service.
RELAY_OPTIONS = {"force_reachability": "public"}


def behind_nat_options(relays: list[str], announce: list[str]) -> dict:
    """``P2P.create`` options for a node behind NAT that is reached through ``relays`` (its
    bootstrap multiaddrs, each ending in /p2p/<peer id>); ``announce``: the addresses it announces
    besides its circuits (its own ``announce_maddrs``)."""
    if not relays:
        raise TransportError("swarm.behind_nat relays through the bootstrap peers, and there are none: "
                             "give --bootstrap (a `swarm-node bootstrap` that relays, on a public address)")
    return dict(use_relay=True, use_auto_relay=True, force_reachability="private", trusted_relays=list(relays),
                announce_maddrs=[*announce, *(f"{r}/p2p-circuit" for r in relays)])


def dial_failure_hint(error: BaseException) -> str | None:
    """What to do when a fetch failed because the publisher's host could not be dialled at all
    (p2pd: "failed to dial"); None for any other failure (a peer gone mid-transfer is routine)."""
    text = str(error)
    if "failed to dial" not in text and "routing: not found" not in text:
        return None
    return ("no address of it could be dialled: it, or this node, is behind NAT. A node behind NAT joins "
            "with --swarm.behind_nat true (it is then reached through the bootstrap peers' relay) or "
            "forwards a TCP port on its router to its --swarm.host_maddrs port and announces it "
            "(--swarm.announce_maddrs '[\"/ip4/PUBLIC_IP/tcp/PORT\"]')")
