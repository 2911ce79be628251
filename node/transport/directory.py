"""What a weights directory is, whatever carries it: the source's pointer, its followers, and the
order in which followers get a relay's place.

A directory (``Directory``) is where a source says what its newest version is (the ``Pointer``)
and where followers say they follow it, with the address their carrier answers on. Each carrier
keeps it in its own store: the hivemind DHT (node/transport/hivemind/directory.py) or an MQTT broker's
retained messages (node/transport/mqtt/directory.py); both sign every record by its owner.

``relay_order`` is pure: first the followers the source has *vouched* for (their rollouts, made
with its versions, were admitted: work a fresh identity has not done), then at most
``MAX_UNVOUCHED_RELAYS`` others; each group in an order drawn from a hash of the version and the
peer id, so it rotates (the end of the chain, the slowest place to be, is not always the same
node's) and no announcement can buy a place. Within each group the followers reached only
through a circuit relay (nodes behind NAT) come after the direct ones: they keep their place
(a vouched one is still served as listed, ahead of fresh ids), but a relay cuts a connection after
about 128 KiB (docs/nat.md), so their children fetch from the nearest direct node above them
(node/broadcast/fetch.py), and the direct ones first keeps that node near.
"""

from __future__ import annotations

import abc
import collections
import hashlib
import time
from dataclasses import dataclass

from swarm_node.node.transport.addresses import relayed
from swarm_node.protocol.manifest import MAX_RELAYS, Manifest

__all__ = ["Directory", "HeldDirectory", "Pointer", "relay_order", "ANNOUNCE_TTL_S", "MAX_UNVOUCHED_RELAYS",
           "MAX_FOLLOWERS"]

ANNOUNCE_TTL_S = 120.0
MAX_FOLLOWERS = 4096  # follower records a pushed directory holds (a flood of fresh ids takes no more)
MAX_UNVOUCHED_RELAYS = 4  # followers the source has no work from that still get a relay's place


@dataclass(frozen=True)
class Pointer:
    version: int
    digest: bytes
    address: str


def _rank(next_version: int, peer: str) -> bytes:
    return hashlib.sha256(f"{next_version}:{peer}".encode()).digest()


def relay_order(followers, next_version: int, vouched=frozenset()) -> list[str]:
    """Followers ({peer id: (address, applied)}) in relay order for ``next_version``; pure, see the
    module doc."""
    ranked = sorted(followers, key=lambda p: (relayed(followers[p][0]), _rank(next_version, p)))
    known = [p for p in ranked if p in vouched]
    others = [p for p in ranked if p not in vouched][:MAX_UNVOUCHED_RELAYS]
    return (known + others)[:MAX_RELAYS]


class Directory(abc.ABC):
    """One source's records, read and written as peer ``me``."""

    source: str
    me: str

    @abc.abstractmethod
    async def announce_version(self, m: Manifest, address: str, ttl: float = ANNOUNCE_TTL_S) -> bool:
        """The source says ``m`` is its newest version, served at ``address``."""

    @abc.abstractmethod
    async def announce_follower(self, address: str, applied: int | None, ttl: float = ANNOUNCE_TTL_S) -> bool:
        """This follower says it follows the source, reachable at ``address``."""

    @abc.abstractmethod
    async def read_pointer(self) -> Pointer | None:
        """The source's newest version, as its pointer says (None: none announced, or expired)."""

    @abc.abstractmethod
    async def read_followers(self, near: list[str] | None = None) -> dict[str, tuple[str, int]]:
        """{follower: (address, applied)}; ``near``: only these peers' records are needed (None: all)."""

    async def close(self) -> None:
        """Stop what the directory runs in the background (a gossip republisher)."""

    async def read_manifest(self, digest: bytes) -> bytes | None:
        """The encoded manifest with this digest, if the directory keeps manifests itself (an MQTT
        broker's retained copy); None: ask a peer for it (the DHT keeps pointers only)."""
        return None


class HeldDirectory(Directory):
    """A directory whose carrier pushes the records to it (a broker's retained messages, gossip):
    it holds the newest checked pointer and follower records itself, and answers reads from them."""

    def __init__(self):
        self._pointer: tuple[dict, float] | None = None  # {"v", "d", "addr"} and its expiry
        self._followers: collections.OrderedDict = collections.OrderedDict()  # peer -> (value, expiry)

    def keep_follower(self, peer: str, value: dict, expires_at: float) -> None:
        """The newest record of each follower, ``MAX_FOLLOWERS`` at most (the least recent go first)."""
        self._followers[peer] = (value, expires_at)
        self._followers.move_to_end(peer)
        while len(self._followers) > MAX_FOLLOWERS:
            self._followers.popitem(last=False)

    async def read_pointer(self) -> Pointer | None:
        if self._pointer is None or self._pointer[1] <= time.time():
            return None
        p = self._pointer[0]
        return Pointer(p["v"], p["d"], p["addr"])

    async def read_followers(self, near: list[str] | None = None) -> dict[str, tuple[str, int]]:
        now = time.time()
        for peer in [p for p, (_, exp) in self._followers.items() if exp <= now]:
            del self._followers[peer]
        wanted = None if near is None else set(near)
        return {p: (v["addr"], v["applied"]) for p, (v, _) in self._followers.items()
                if wanted is None or p in wanted}
