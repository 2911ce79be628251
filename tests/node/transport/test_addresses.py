"""Addresses that name their peer (node/transport/addresses.py), by hand."""

from __future__ import annotations

from swarm_node.node.transport.addresses import dialable_addrs, names_peer, peer_id_of, with_peer, without_peer

ADDR = "/ip4/1.2.3.4/tcp/31337/p2p/12D3KooWabc"


def test_the_peer_id_and_the_place_of_an_address():
    assert names_peer(ADDR) and not names_peer("/ip4/1.2.3.4/tcp/31337")
    assert peer_id_of(ADDR) == "12D3KooWabc"
    assert peer_id_of("/ip4/1.2.3.4/tcp/1/p2p/relay/p2p-circuit/p2p/QmLast") == "QmLast"  # the last one
    assert peer_id_of("/ip4/1.2.3.4/tcp/31337") is None and peer_id_of("12D3KooWabc") is None
    assert without_peer(ADDR) == "/ip4/1.2.3.4/tcp/31337"
    assert without_peer("/ip4/1.2.3.4/tcp/31337") == "/ip4/1.2.3.4/tcp/31337"


def test_with_peer_adds_the_id_once():
    assert with_peer("/ip4/1.2.3.4/tcp/31337", "12D3KooWabc") == ADDR
    assert with_peer(ADDR, "12D3KooWother") == ADDR  # names a peer already: unchanged
    assert with_peer("", "12D3KooWabc") == "/p2p/12D3KooWabc"  # the peer by id, wherever it is


def test_a_host_gives_its_announced_then_real_then_loopback_addresses():
    listening = ["/ip4/0.0.0.0/tcp/4001", "/ip6/::/tcp/4001"]
    assert dialable_addrs(listening, ["/dns4/node.example/tcp/4001"], "ID") == ["/dns4/node.example/tcp/4001/p2p/ID"]
    assert dialable_addrs(listening + ["/ip4/10.0.0.5/tcp/4001"], [], "ID") == ["/ip4/10.0.0.5/tcp/4001/p2p/ID"]
    assert dialable_addrs(listening, [], "ID") == ["/ip4/127.0.0.1/tcp/4001/p2p/ID", "/ip6/::1/tcp/4001/p2p/ID"]
    assert dialable_addrs([], ["/ip4/1.2.3.4/tcp/1/p2p/ID"], "ID") == ["/ip4/1.2.3.4/tcp/1/p2p/ID"]
