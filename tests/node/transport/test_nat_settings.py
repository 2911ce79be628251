"""Behind NAT, the pure parts: the hivemind daemon's options for a node reached through its
bootstrap peers' relay and for the relay itself (node/transport/hivemind/nat.py), the hint a failed
dial gets, the one-hop circuit address a weights record may carry, and the libp2p carrier's refusal
(node/transport/libp2p/settings.py). The namespaced tests are in tests/node/nat/."""

from __future__ import annotations

import pytest

from swarm_node.node.errors import ConfigError
from swarm_node.node.config.config import SwarmConfig
from swarm_node.node.transport.base import TransportError
from swarm_node.node.transport.hivemind.carrier import _peer_of
from swarm_node.node.transport.hivemind.index_records import _ADDR_RE
from swarm_node.node.transport.hivemind.nat import RELAY_OPTIONS, behind_nat_options, dial_failure_hint
from swarm_node.node.transport.hivemind.settings import transport_kwargs as hivemind_kwargs
from swarm_node.node.transport.libp2p.settings import transport_kwargs as libp2p_kwargs
from swarm_node.protocol.identity import Identity

RELAY = "/ip4/203.0.113.7/tcp/31337/p2p/QmS9hbFfqnVB2kZdb3rnHd9bA2XeeqFK7hjbRyYHKacW6q"
PEER = "QmSVGatAKGR6B1Da8LnhGdU4e3By1SsGtDCmLEGVn7Yifw"


def test_a_node_behind_nat_reserves_at_its_bootstraps_and_announces_its_circuits_through_them():
    opts = behind_nat_options([RELAY], ["/ip4/198.51.100.2/tcp/4001"])
    assert opts["use_auto_relay"] and opts["use_relay"] and opts["force_reachability"] == "private"
    assert opts["trusted_relays"] == [RELAY]
    assert opts["announce_maddrs"] == ["/ip4/198.51.100.2/tcp/4001", f"{RELAY}/p2p-circuit"]
    assert RELAY_OPTIONS == {"force_reachability": "public"}  # the relay runs its service only when public


def test_behind_nat_without_bootstrap_peers_says_what_is_missing():
    with pytest.raises(TransportError, match="--bootstrap"):
        behind_nat_options([], [])


def test_the_config_key_reaches_the_hivemind_transport_and_is_off_by_default():
    ident = Identity.generate()
    assert hivemind_kwargs(SwarmConfig(), ident, p2p_identity_path=None, on_retry=None)["behind_nat"] is False
    on = SwarmConfig(behind_nat=True, initial_peers=[RELAY])
    assert hivemind_kwargs(on, ident, p2p_identity_path=None, on_retry=None)["behind_nat"] is True


def test_the_libp2p_carrier_refuses_behind_nat_and_says_what_to_open():
    ident = Identity.generate()
    assert libp2p_kwargs(SwarmConfig(), ident, p2p_identity_path=None, on_retry=None)["bootstrap"] == []
    with pytest.raises(ConfigError, match="no relay.*forward a TCP port on the router"):
        libp2p_kwargs(SwarmConfig(behind_nat=True), ident, p2p_identity_path=None, on_retry=None)


def test_only_a_failed_dial_gets_the_nat_hint():
    hint = dial_failure_hint(RuntimeError("Connect failed. msg=failed to dial: failed to dial 12D3KooW: all dials failed"))
    assert hint and "--swarm.behind_nat true" in hint and "forwards a TCP port on its router" in hint
    assert dial_failure_hint(ConnectionResetError("stream reset")) is None  # a peer gone mid-transfer


def test_a_weights_record_may_name_one_relay_hop_never_a_chain():
    assert _ADDR_RE.fullmatch(RELAY) is not None  # a plain address
    assert _ADDR_RE.fullmatch(f"{RELAY}/p2p-circuit/p2p/{PEER}") is not None
    assert _ADDR_RE.fullmatch(f"{RELAY}/p2p-circuit/p2p/{PEER}/p2p-circuit/p2p/{PEER}") is None
    assert _ADDR_RE.fullmatch(f"{RELAY}/p2p-circuit") is None  # names no peer


def test_the_carrier_dials_the_last_peer_of_a_circuit_address_through_the_daemon():
    peer, where = _peer_of(f"{RELAY}/p2p-circuit/p2p/{PEER}")
    assert peer.to_base58() == PEER and where is None  # p2pd finds the circuit itself
    peer, where = _peer_of(RELAY)
    assert peer.to_base58() == RELAY.rsplit("/", 1)[1] and str(where) == "/ip4/203.0.113.7/tcp/31337"



def test_behind_nat_a_join_through_the_peer_cache_still_reserves_at_the_bootstraps(monkeypatch):
    """A cached peer is a node, not a relay: its circuit address would lead nowhere, so the relays
    stay the configured bootstraps (the join itself goes through the cache)."""
    import asyncio

    from swarm_node.node.transport.hivemind import transport as hm
    from swarm_node.node.transport.join import PEER_CACHE

    cached = "/ip4/198.51.100.9/tcp/4001/p2p/" + PEER
    joins = []

    async def nothing(*_, **__):
        return None

    class P2P:  # what start() asks of the joined daemon
        add_binary_stream_handler = staticmethod(nothing)

        async def get_visible_maddrs(self):
            return [f"{RELAY}/p2p-circuit/p2p/{PEER}"]

    async def fake_start(*, initial_peers, p2p_options, **_):  # the bootstrap is down, the cached peer answers
        joins.append((initial_peers, p2p_options))
        if initial_peers == [RELAY]:
            raise TransportError("no bootstrap answered")
        return type("DHTNode", (), {"p2p": P2P()})()

    monkeypatch.setattr(hm, "start_dht_node", fake_start)
    monkeypatch.setattr(hm, "serve_dialback", nothing)
    ident = Identity.generate()
    t = hm.HivemindTransport(swarm="s", publisher=ident.peer_id, signer=ident, initial_peers=[RELAY], behind_nat=True,
                             join_retries=0, fallback_peers=lambda: [cached])
    asyncio.run(t.start())
    assert t.found_via == PEER_CACHE and [peers for peers, _ in joins] == [[RELAY], [cached]]
    assert all(opts["trusted_relays"] == [RELAY] and opts["announce_maddrs"] == [f"{RELAY}/p2p-circuit"]
               for _, opts in joins)
