"""A libp2p node whose bootstrap is gone finds its swarm again through its peer cache
(node/swarm/peer_cache.py, node/transport/join.py): real py-libp2p hosts on loopback."""

from __future__ import annotations

import asyncio

from swarm_node.node.clock import RoundClock
from swarm_node.node.swarm.peer_cache import PeerCache
from swarm_node.node.transport.libp2p.host import Libp2pHost, libp2p_peer_id
from swarm_node.node.transport.libp2p.transport import gossip_topics
from swarm_node.protocol.identity import Identity
from tests.helpers.libp2p_net import LOOPBACK, envelope, exchange, transport, until


def test_a_node_whose_bootstrap_is_gone_rejoins_from_its_cache_and_gets_a_peers_rollouts(tmp_path):
    """A and N join through a bootstrap; N hears A's signed heartbeat and caches its address. N
    stops, the bootstrap stops, N starts again with the same dead bootstrap: it joins through A
    (``found_via`` "peer cache") and receives A's next rollouts."""
    ia, inode = Identity.generate(), Identity.generate()
    clock = RoundClock(2.0)

    async def main():
        boot = Libp2pHost(Identity.generate(), LOOPBACK, [], px_interval=0.5)
        await boot.start(20)
        a = transport(ia, boot.addrs)
        ea = exchange(a, ia, clock)
        await ea.start()
        n = transport(inode, boot.addrs)
        en = exchange(n, inode, clock)
        await en.start()
        again = None
        try:
            assert (a.found_via, n.found_via) == ("bootstrap", "bootstrap")
            rollouts, peers = gossip_topics("t")
            await until(lambda: a.host.mesh_peers(peers) >= 1 and n.host.mesh_peers(peers) >= 1, 30,
                        "A and N in each other's heartbeat mesh (through peer exchange)")
            await ea.announce(clock.current(), 1)
            await until(lambda: ia.peer_id in en.peers, 20, "A's heartbeat at N")
            cache = PeerCache(tmp_path / "peers.json", inode)
            # A's heartbeat's addresses name its own key; one naming another key would not be kept.
            assert not n.is_own_address(ia.peer_id, f"/ip4/127.0.0.1/tcp/1/p2p/{libp2p_peer_id(inode)}")
            assert cache.note(en.peers, {ia.peer_id: 2}, n.is_own_address)
            cache.save()
            assert cache.addrs() and all(a_ in a.host.addrs for a_ in cache.addrs())
            await en.close()
            await boot.close()  # the only bootstrap is gone

            again = transport(inode, boot.addrs, fallback_peers=PeerCache(tmp_path / "peers.json", inode).load().addrs)
            en = exchange(again, inode, clock)
            await en.start()
            assert again.found_via == "peer cache"
            await until(lambda: again.host.mesh_peers(rollouts) >= 1 and a.host.mesh_peers(rollouts) >= 1, 30,
                        "A and N in each other's mesh")
            r = clock.current()
            await a.publish(r, envelope(ia, r), 60)
            await until(lambda: en.stats.envelopes_in >= 1, 20, "A's envelope at N")
            assert en.stats.envelopes_in >= 1 and not en.stats.rejected
        finally:
            await en.close()
            await ea.close()
            await boot.close()

    asyncio.run(main())
