"""The interface between the node runtime and whatever carries its messages.

A transport moves opaque bytes (signed envelopes, ``protocol.signing``) keyed by
``(round, publisher)``: ``publish`` makes this node's envelope for a round available to the
swarm, ``poll`` returns envelopes of other nodes that this node has not seen yet. Heartbeats
(``announce`` / ``poll_announcements``) are one small envelope per publisher, replaced each
time, so a node can tell who is alive without downloading anything. It never
interprets or trusts what it carries: the publisher name is the carrier's claim, and the
node's verifier decides whether the bytes are authentic. Transports only enforce what must be
enforced before bytes are buffered (the frame size limit) and count what they refused.
"""

from __future__ import annotations

import abc
import collections
from dataclasses import dataclass, field
from typing import Iterable

from swarm_node.protocol.errors import SwarmError
from swarm_node.protocol.signing import MAX_ENVELOPE_SIZE

__all__ = ["Delivery", "Transport", "TransportError", "MAX_ENVELOPE_SIZE", "MAX_ANNOUNCEMENT_SIZE"]

# A heartbeat is a few hundred bytes; it lives in the DHT itself, which must stay small (hivemind
# values above ~64 KB break the DHT's process pipe).
MAX_ANNOUNCEMENT_SIZE = 8 * 1024


class TransportError(SwarmError):
    """The transport could not start or reach the swarm (the message says what to check)."""


@dataclass(frozen=True)
class Delivery:
    round: int
    publisher: str  # as claimed by the carrier (the DHT subkey, the hub key): not authenticated
    data: bytes


@dataclass
class Transport(abc.ABC):
    """Base class: a carrier of envelopes between the nodes of one swarm."""

    swarm: str
    publisher: str  # this node's peer id: the key its envelopes are published under
    rejected: collections.Counter = field(default_factory=collections.Counter, init=False)

    @abc.abstractmethod
    async def start(self) -> None:
        """Join the swarm; raises ``TransportError`` with a clear message when it cannot."""

    @abc.abstractmethod
    async def publish(self, round: int, data: bytes, expires_in: float) -> None:
        """Make ``data`` this node's envelope for ``round`` (replacing an earlier one) for
        ``expires_in`` seconds."""

    async def publish_as(self, publisher: str, round: int, data: bytes, expires_in: float) -> None:
        """Publish under another publisher's key. Only simulated adversaries do this, over carriers
        whose index is not authenticated (the in-memory hub); receivers' checks must catch it.
        The hivemind index is owner-signed and refuses it (``PermissionError``)."""
        raise NotImplementedError(f"{type(self).__name__} cannot publish under another key")

    @abc.abstractmethod
    async def poll(self, rounds: Iterable[int], want: int | None = None,
                   max_size: int | None = None) -> list[Delivery]:
        """Envelopes of other publishers for ``rounds`` that this node has not received yet.
        ``want``: envelopes a round worth fetching (about J groups' worth); a carrier that pays
        per fetch (hivemind) fetches about that many, publishers with a verified history first
        (``vouch``). None: everything. ``max_size``: bodies larger than this (all the node could
        use, node/swarm/limits.py ``usable_envelope_bytes``) are not taken, counted ``oversized``; None:
        the message limit."""

    async def broadcast_parts(self, identity, source: str, upload):
        """The weight broadcast's carrier and ``source``'s directory over this transport's own
        connection (node/broadcast/): ``(Carrier, Directory)``, the directory started."""
        raise TransportError(f"the weight broadcast does not run over {type(self).__name__}: "
                             f"use swarm.transport hivemind, mqtt or libp2p")

    def set_gate(self, gate) -> None:
        """``gate(Delivery) -> bool``: the node's admission checks, for a carrier that passes
        messages on (gossipsub forwards only what passes; node/swarm/exchange.py ``SwarmExchange.gate``).
        It may be called from a worker thread and counts its own refusals. Carriers that forward
        nothing ignore it."""

    def vouch(self, publisher: str) -> None:
        """The node admitted an envelope of ``publisher`` (it verified and passed every check)."""

    def admitted(self, publisher: str, round: int) -> None:
        """The node admitted ``publisher``'s envelope for ``round``: ``vouch`` unless the carrier
        counts the rounds (a push carrier vouches only after several: node/transport/standing.py)."""
        self.vouch(publisher)

    def is_own_address(self, publisher: str, addr: str) -> bool:
        """Whether the ``/p2p/`` id of ``addr`` (an address ``publisher``'s signed heartbeat gives)
        is known to be ``publisher``'s own host, so that a node keeps it to find the swarm again
        (node/swarm/peer_cache.py). True where the carrier cannot tell (it dials no peer's host)."""
        return True

    def distrust(self, publisher: str, round: int) -> bool:
        """The node refused ``publisher``'s envelope for ``round`` for a fault of its own (a bad
        signature, a lying record), or it sent nothing usable for several rounds
        (node/swarm/unusable.py): a carrier that pays per fetch backs it off. True when it did
        (a carrier whose messages come to it unasked has nothing to back off)."""
        return False

    @abc.abstractmethod
    async def announce(self, data: bytes, expires_in: float) -> None:
        """Make ``data`` (a signed announcement) this node's heartbeat for ``expires_in`` seconds."""

    @abc.abstractmethod
    async def poll_announcements(self) -> list[Delivery]:
        """Other publishers' heartbeats that changed since the last call (``round`` = -1)."""

    @abc.abstractmethod
    async def close(self) -> None:
        """Leave the swarm and release every resource (idempotent)."""

    def alive(self) -> bool:
        """False once the carrier is known to be dead (say, its daemon exited); cheap, no I/O."""
        return True

    async def restart(self) -> None:
        """Leave and join again (after ``alive`` went False, or polls kept failing); raises
        ``TransportError`` when the swarm cannot be reached yet."""
        await self.close()
        await self.start()

    def info(self) -> dict:
        """Addresses and peer counts for the status display and logs."""
        return {"transport": type(self).__name__}

    def buffer_sizes(self) -> dict[str, int]:
        """Entries held in each of this transport's caches: none may grow with the run's length
        (tests/node/swarm/test_long_run_memory.py)."""
        return {}
