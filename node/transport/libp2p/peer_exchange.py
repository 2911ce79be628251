"""How a py-libp2p host finds its peers: the bootstrap addresses, then peer exchange.

Every host answers ``/swarm-node/peers/1.0.0`` with the listen addresses of up to ``PX_REPLY``
peers it is connected to, and a host short of ``target_peers`` connections asks a connected peer
for its list every ``px_interval`` seconds (sooner while asking finds someone new). Addresses are
claims: dialling one authenticates the peer id (noise), and at most ``PX_DIALS`` of one reply are
tried, so one peer's list cannot fill this host's connections with identities of its choosing;
the bootstrap peers are dialled again whenever none of them is connected.

Runs on the host's trio thread (node/transport/libp2p/host.py starts it there).
"""

from __future__ import annotations

import logging
import random

import msgpack
import multiaddr
import trio
from libp2p.custom_types import TProtocol
from libp2p.network.stream.exceptions import StreamEOF
from libp2p.peer.id import ID
from libp2p.peer.peerinfo import info_from_p2p_addr

from swarm_node.node.transport.addresses import peer_id_of, with_peer, without_peer
from swarm_node.node.transport.libp2p.settings import UNDIALABLE

log = logging.getLogger("swarm_node.node.transport.libp2p.host")  # the host's log name, as before the split

__all__ = ["PeerExchange", "PX_PROTOCOL", "DIAL_TIMEOUT_S"]

PX_PROTOCOL = TProtocol("/swarm-node/peers/1.0.0")
PX_REPLY = 32  # addresses a peer-exchange reply lists
PX_DIALS = 3  # addresses of one reply tried
PX_FIRST_S = 0.5  # the first exchange's wait; doubles (to px_interval) while nobody new is found
PX_REPLY_BYTES = 64 * 1024
DIAL_TIMEOUT_S = 10.0


class PeerExchange:
    """Dials the bootstrap peers and exchanges peer lists for one running libp2p ``host``
    (``peer_id``: its own libp2p id, never dialled)."""

    def __init__(self, host, peer_id: str, bootstrap: list[str], target_peers: int, px_interval: float):
        self.host, self.peer_id, self.bootstrap = host, peer_id, bootstrap
        self.target_peers, self.px_interval = target_peers, px_interval
        self.undialable = 0  # addresses peer exchange named that could not be dialled

    def _undialable(self, addr: str) -> None:
        """A peer another peer is connected to, which this host cannot reach: said once at WARNING
        (the usual cause is NAT, and the fix is the operator's), then counted."""
        self.undialable += 1
        if self.undialable == 1:
            log.warning(UNDIALABLE.format(peer=peer_id_of(addr), addr=without_peer(addr)))

    def connected(self) -> list[ID]:
        return list(self.host.get_connected_peers())

    async def dial(self, addr: str) -> bool:
        try:
            info = info_from_p2p_addr(multiaddr.Multiaddr(addr))
        except Exception as e:  # noqa: BLE001 - a malformed address is a claim we drop
            log.debug("not a p2p address %r: %s", addr, e)
            return False
        if info.peer_id == self.host.get_id():
            return False
        with trio.move_on_after(DIAL_TIMEOUT_S):
            try:
                await self.host.connect(info)
                return True
            except Exception as e:  # noqa: BLE001 - unreachable, refused, wrong peer id
                log.debug("could not dial %s: %s", addr, e)
        return False

    async def connect_bootstrap(self) -> int:
        """Dial every bootstrap address; returns how many answered."""
        return await self.connect(self.bootstrap)

    async def connect(self, addrs: list[str]) -> int:
        """Dial each of ``addrs`` (the bootstraps, or the peers a node cached); returns how many answered."""
        ok = 0
        for addr in addrs:
            ok += await self.dial(addr)
        return ok

    def _bootstrap_connected(self, peers: list[ID]) -> bool:
        ids = {peer_id_of(a) for a in self.bootstrap}
        return any(p.to_base58() in ids for p in peers)

    async def serve(self, stream) -> None:
        """Answer a peer-exchange request: where up to PX_REPLY of our other peers listen."""
        try:
            peers = [p for p in self.host.get_connected_peers() if p != stream.muxed_conn.peer_id]
            random.shuffle(peers)
            out = []
            for p in peers[:PX_REPLY]:
                addrs = [without_peer(str(a)) for a in self.host.get_peerstore().addrs(p)]
                if addrs:
                    out.append(with_peer(addrs[0], p.to_base58()))
            await stream.write(msgpack.packb(out))
        except Exception as e:  # noqa: BLE001 - the asker went away
            log.debug("peer exchange reply failed: %s", e)
        finally:
            await stream.close()

    async def _ask(self, peer: ID) -> list[str]:
        data = b""
        with trio.move_on_after(DIAL_TIMEOUT_S):
            stream = await self.host.new_stream(peer, [PX_PROTOCOL])
            try:
                while len(data) <= PX_REPLY_BYTES:
                    data += await stream.read(PX_REPLY_BYTES)
            except StreamEOF:
                pass
            finally:
                await stream.close()
        try:
            got = msgpack.unpackb(data[:PX_REPLY_BYTES], raw=False)
        except Exception:  # noqa: BLE001 - hostile bytes
            return []
        return [a for a in got if isinstance(a, str) and len(a) < 512][:PX_REPLY] if isinstance(got, list) else []

    async def run(self) -> None:
        """Keep this host among ``target_peers`` peers and one bootstrap peer, forever."""
        # Ask again after 0.5 s while asking finds someone new (a swarm that is starting: the others
        # reach the bootstrap over the next seconds), backing off to ``px_interval`` once it does not.
        delay = PX_FIRST_S
        while True:
            peers = self.connected()
            found = False
            if len(peers) < self.target_peers and peers:
                try:
                    known = {p.to_base58() for p in peers}
                    fresh = [a for a in await self._ask(random.choice(peers))
                             if peer_id_of(a) not in known and peer_id_of(a) != self.peer_id]
                    random.shuffle(fresh)
                    for addr in fresh[:min(PX_DIALS, self.target_peers - len(peers))]:
                        dialled = await self.dial(addr)
                        found |= dialled
                        if not dialled:
                            self._undialable(addr)
                except Exception as e:  # noqa: BLE001 - the next round tries another peer
                    log.debug("peer exchange failed: %s", e)
            # The bootstrap peers are the one list this host did not take from a peer: keep one.
            if self.bootstrap and not self._bootstrap_connected(self.connected()):
                await self.connect_bootstrap()
            delay = PX_FIRST_S if found else min(2 * delay, self.px_interval)
            await trio.sleep(delay)
