"""The peers this node has verified, kept in its run folder (``peers.json``): where it finds the
swarm again when every bootstrap it was given is gone.

Who gets in: a peer whose heartbeat this node verified (signed by the peer's key, addresses
inside the signed message) *and* whose groups it trained on, with a gradient, in at least
``MIN_ROUNDS`` distinct rounds (node/swarm/peer_work.py): a heartbeat costs nothing, and one
group taken once, or groups whose rewards were all equal, cost a key little more. Ranked by that
sustained work: a full cache gives way first to a peer not heard for ``IDLE_S``, then to the one
trained on in the fewest rounds (ties: heard longest ago), so a flood of keys with a group or two
each displaces its own kind, never a peer with a long history, and a newcomer that keeps being
trained on climbs past them (the work ledger never closes to new senders, as the per-peer
counters of node/swarm/stats.py do after 1,024). The work counted is kept in the file, so a
restart does not reset it.

Which addresses: those that parse and name a ``/p2p/`` peer (``dialable``), and that the carrier
confirms as the publisher's own host (``Transport.is_own_address``: over hivemind, a host that
served one of its bodies matching its owner-signed index entry; over libp2p, the publisher's own
key), at most ``ADDRS_PER_PEER`` a peer, and ``JOIN_ADDRS_PER_PEER`` of them in a join. The
file is signed with this node's own key: a cache edited on disk (or another node's) is refused
with a warning and starts empty.

At start a carrier that joins through bootstraps (hivemind, libp2p) tries its bootstraps first
and then the cached addresses, the strongest peers first (node/transport/join.py); any peer of
the swarm serves as an entry point, so a cached one is as good as a bootstrap.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import time
from pathlib import Path
from typing import Callable, Mapping

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

from swarm_node.node.transport.work_ledger import PEER_WORK
from swarm_node.protocol.identity import Identity

log = logging.getLogger(__name__)

MIN_ROUNDS = PEER_WORK.rounds  # the one bar (node/transport/work_ledger.py): the clock watch counts peers past it too

__all__ = ["PeerCache", "keep_peer_cache", "refresh_peer_cache", "dialable", "CACHE_FILE", "LIMIT",
           "ADDRS_PER_PEER", "MIN_ROUNDS"]

CACHE_FILE = "peers.json"
LIMIT = 64  # peers kept
ADDRS_PER_PEER = 4  # of the up to 16 a heartbeat may carry
JOIN_ADDRS = 16  # addresses a join tries from the cache
JOIN_ADDRS_PER_PEER = 2  # of them from one peer: a few keys cannot fill the join list
IDLE_S = 24 * 3600.0  # a peer not heard for this long gives way first, however long its history
REFRESH_S = 60.0  # a peer's "last heard" moves at most this often (changing its addresses does not move it)


def dialable(addr: str) -> bool:
    """A multiaddr that parses and names the peer to dial (``.../p2p/<id>``). The daemon refuses to
    start on a bootstrap list with one entry that does not parse, so a peer's garbage address would
    sink every cached address of a join: each is checked alone, here."""
    try:
        from multiaddr import Multiaddr

        return any(p.name == "p2p" for p in Multiaddr(addr).protocols())
    except Exception:  # noqa: BLE001 - any parse failure: not an address to dial
        return False


def _routable_first(addrs: list[str]) -> list[str]:
    return sorted(addrs, key=lambda a: a.startswith(("/ip4/127.", "/ip6/::1/")))


def strength(entry: dict, now: float) -> tuple:
    """Sort key, the strongest last: a peer heard within ``IDLE_S`` before an idle one; among
    active peers the most rounds of work, then the most recently heard; idle ones by when heard."""
    rounds, seen = entry.get("rounds", 0), entry["seen"]
    return (1, rounds, seen) if now - seen <= IDLE_S else (0, seen, rounds)


class PeerCache:
    """``peer id -> (addresses, last heard, rounds of work)`` of verified peers this node trained on."""

    def __init__(self, path: Path, identity: Identity, limit: int = LIMIT):
        self.path = Path(path)
        self.identity = identity
        self.limit = limit
        self.peers: dict[str, dict] = {}  # peer id -> {"addrs": [...], "seen": unix time, "rounds": n}
        self._base: dict[str, int] = {}  # rounds of work counted before this start (the file's)

    def _payload(self) -> bytes:
        return json.dumps({"node": self.identity.peer_id, "peers": self.peers}, sort_keys=True).encode()

    def load(self) -> "PeerCache":
        """Read the cache; a missing file is an empty cache, a damaged or foreign one is refused
        (said once) and starts empty."""
        if not self.path.exists():
            return self
        try:
            doc = json.loads(self.path.read_text())
            peers = doc["peers"]
            if doc.get("node") != self.identity.peer_id or not isinstance(peers, dict):
                raise ValueError("written by another node")
            self.peers = {str(k): {"addrs": [str(a) for a in v["addrs"]][:ADDRS_PER_PEER], "seen": float(v["seen"]),
                                   **({"rounds": int(v["rounds"])} if "rounds" in v else {})}
                          for k, v in peers.items()}
            Ed25519PublicKey.from_public_bytes(self.identity.public_key_bytes).verify(
                bytes.fromhex(doc["signature"]), self._payload())
        except (OSError, ValueError, KeyError, TypeError, AttributeError, InvalidSignature) as e:
            log.warning("peer cache %s refused (%s): starting with none", self.path,
                        "its signature is not this node's" if isinstance(e, InvalidSignature) else e)
            self.peers = {}
        self._base = {k: v.get("rounds", 0) for k, v in self.peers.items()}
        self._trim(time.time())
        return self

    def note(self, heard: dict, work: Mapping[str, int], own: Callable[[str, str], bool] | None = None,
             now: float | None = None) -> bool:
        """Bring the cache up to date: ``heard`` (sender -> verified ``Announcement``), ``work``
        (sender -> distinct rounds trained on with a gradient since start, node/swarm/peer_work.py),
        ``own(sender, addr)``: whether the carrier confirms ``addr`` as the sender's own host (None:
        it cannot tell). Returns whether anything changed."""
        now = time.time() if now is None else now
        changed = False
        for sender, entry in self.peers.items():  # work counts whether or not the peer is heard now
            if (rounds := self._rounds(sender, work)) != entry.get("rounds", 0):
                entry["rounds"] = rounds
                changed = True
        for sender, ann in heard.items():
            rounds = self._rounds(sender, work)
            if rounds < MIN_ROUNDS or sender == self.identity.peer_id:
                continue
            addrs = _routable_first([str(a) for a in getattr(ann, "addrs", ())
                                     if dialable(str(a)) and (own is None or own(sender, str(a)))])[:ADDRS_PER_PEER]
            old = self.peers.get(sender)
            if not addrs:  # none confirmed yet (say, since a restart): what was confirmed before stays
                continue
            if old is None or now - old["seen"] > REFRESH_S:
                self.peers[sender] = {"addrs": addrs, "seen": now, "rounds": rounds}
                changed = True
            elif old["addrs"] != addrs:  # new addresses, but no fresher: permuting them buys no rank
                old["addrs"] = addrs
                changed = True
        return self._trim(now) or changed

    def _rounds(self, sender: str, work: Mapping[str, int]) -> int:
        # Never less than the cache knew: the ledger is bounded and may have forgotten the peer.
        return max(self._base.get(sender, 0) + work.get(sender, 0), self.peers.get(sender, {}).get("rounds", 0))

    def _ranked(self, now: float) -> list[tuple[str, dict]]:
        return sorted(self.peers.items(), key=lambda kv: strength(kv[1], now), reverse=True)

    def _trim(self, now: float) -> bool:
        if len(self.peers) <= self.limit:
            return False
        self.peers = dict(self._ranked(now)[:self.limit])
        return True

    def addrs(self, limit: int = JOIN_ADDRS) -> list[str]:
        """Addresses to join through, the strongest peers first (``strength``)."""
        out: list[str] = []
        for _, p in self._ranked(time.time()):
            out += [a for a in p["addrs"] if dialable(a) and a not in out][:JOIN_ADDRS_PER_PEER]
        return out[:limit]

    def save(self) -> None:
        """Write the cache, signed with this node's key (a temporary file, then renamed)."""
        doc = {"node": self.identity.peer_id, "peers": self.peers,
               "signature": self.identity.sign(self._payload()).hex()}
        tmp = self.path.with_name(f".{self.path.name}.tmp-{os.getpid()}")
        tmp.write_text(json.dumps(doc, indent=1, sort_keys=True))
        os.replace(tmp, self.path)


def refresh_peer_cache(exchange, cache: PeerCache) -> None:
    """Note the exchange's verified heartbeats and work in the cache, and save it if it changed."""
    try:
        if cache.note(exchange.peers, exchange.work, exchange.transport.is_own_address):
            cache.save()
    except OSError as e:  # a full disk must not stop training
        log.warning("could not save the peer cache %s: %s", cache.path, e)


async def keep_peer_cache(exchange, cache: PeerCache, every_s: float) -> None:
    """Refresh and save the cache from the exchange every ``every_s`` seconds, and once more when
    cancelled (the node's close)."""
    try:
        while True:
            await asyncio.sleep(every_s)
            refresh_peer_cache(exchange, cache)
    finally:
        refresh_peer_cache(exchange, cache)
