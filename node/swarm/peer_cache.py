"""The peers this node has verified, kept in its run folder (``peers.json``): where it finds the
swarm again when every bootstrap it was given is gone.

Who gets in: a peer whose heartbeat this node verified (signed by the peer's key, addresses
inside the signed message) *and* whose rollout groups it trained on, so a flood of fresh keys
that only send heartbeats cannot fill the cache with its own addresses (the most a Sybil gets in
is what it paid for with groups good enough to be trained on). Bounded: ``LIMIT`` peers, the most
recently heard kept, ``ADDRS_PER_PEER`` addresses each. The file is signed with this node's own
key: a cache edited on disk (or another node's) is refused with a warning and starts empty.

At start a carrier that joins through bootstraps (hivemind) tries its bootstraps first and then
the cached addresses, most recently heard first (node/transport/hivemind/transport.py); any peer
of the swarm serves as an entry point, so a cached one is as good as a bootstrap.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import time
from pathlib import Path

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

from protocol.identity import Identity

log = logging.getLogger(__name__)

__all__ = ["PeerCache", "keep_peer_cache", "CACHE_FILE", "LIMIT", "ADDRS_PER_PEER"]

CACHE_FILE = "peers.json"
LIMIT = 64  # peers kept
ADDRS_PER_PEER = 4  # of the up to 16 a heartbeat may carry
JOIN_ADDRS = 16  # addresses a join tries from the cache
JOIN_ADDRS_PER_PEER = 2  # of them from one peer: a few keys cannot fill the join list
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


class PeerCache:
    """``peer id -> (addresses, last heard)`` of verified peers this node trained on."""

    def __init__(self, path: Path, identity: Identity, limit: int = LIMIT):
        self.path = Path(path)
        self.identity = identity
        self.limit = limit
        self.peers: dict[str, dict] = {}  # peer id -> {"addrs": [...], "seen": unix time}

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
            self.peers = {str(k): {"addrs": [str(a) for a in v["addrs"]][:ADDRS_PER_PEER], "seen": float(v["seen"])}
                          for k, v in peers.items()}
            Ed25519PublicKey.from_public_bytes(self.identity.public_key_bytes).verify(
                bytes.fromhex(doc["signature"]), self._payload())
        except (OSError, ValueError, KeyError, TypeError, AttributeError, InvalidSignature) as e:
            log.warning("peer cache %s refused (%s): starting with none", self.path,
                        "its signature is not this node's" if isinstance(e, InvalidSignature) else e)
            self.peers = {}
        self._trim()
        return self

    def note(self, heard: dict, trained_on, now: float | None = None) -> bool:
        """Add or refresh the peers of ``heard`` (sender -> verified ``Announcement``) that are in
        ``trained_on`` and gave addresses; returns whether anything changed."""
        now = time.time() if now is None else now
        changed = False
        for sender, ann in heard.items():
            if sender not in trained_on or sender == self.identity.peer_id:
                continue
            addrs = _routable_first([str(a) for a in getattr(ann, "addrs", ()) if dialable(str(a))])[:ADDRS_PER_PEER]
            if not addrs:
                continue
            old = self.peers.get(sender)
            if old is None or now - old["seen"] > REFRESH_S:
                self.peers[sender] = {"addrs": addrs, "seen": now}
                changed = True
            elif old["addrs"] != addrs:  # new addresses, but no fresher: permuting them buys no rank
                old["addrs"] = addrs
                changed = True
        return self._trim() or changed

    def _trim(self) -> bool:
        if len(self.peers) <= self.limit:
            return False
        keep = sorted(self.peers.items(), key=lambda kv: kv[1]["seen"], reverse=True)[:self.limit]
        self.peers = dict(keep)
        return True

    def addrs(self, limit: int = JOIN_ADDRS) -> list[str]:
        """Addresses to join through, the most recently heard peers first."""
        out: list[str] = []
        for _, p in sorted(self.peers.items(), key=lambda kv: kv[1]["seen"], reverse=True):
            out += [a for a in p["addrs"] if dialable(a) and a not in out][:JOIN_ADDRS_PER_PEER]
        return out[:limit]

    def save(self) -> None:
        """Write the cache, signed with this node's key (a temporary file, then renamed)."""
        doc = {"node": self.identity.peer_id, "peers": self.peers,
               "signature": self.identity.sign(self._payload()).hex()}
        tmp = self.path.with_name(f".{self.path.name}.tmp-{os.getpid()}")
        tmp.write_text(json.dumps(doc, indent=1, sort_keys=True))
        os.replace(tmp, self.path)


async def keep_peer_cache(exchange, cache: PeerCache, every_s: float) -> None:
    """Refresh and save the cache from the exchange's verified heartbeats every ``every_s``
    seconds, and once more when cancelled (the node's close)."""
    def refresh() -> None:
        try:
            if cache.note(exchange.peers, exchange.stats.groups_used):
                cache.save()
        except OSError as e:  # a full disk must not stop training
            log.warning("could not save the peer cache %s: %s", cache.path, e)

    try:
        while True:
            await asyncio.sleep(every_s)
            refresh()
    finally:
        refresh()
