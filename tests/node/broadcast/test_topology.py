"""The relay topology, by hand: parents, children and fallbacks of chains, trees and late joiners."""

from __future__ import annotations

from swarm_node.node.broadcast import topology
from swarm_node.protocol.identity import Identity
from swarm_node.protocol.manifest import build_manifest

SRC = Identity.generate()
R = [f"sn1r{i}" for i in range(7)]


def manifest(fanout: int, relays=R):
    return build_manifest(b"x" * 10, SRC, swarm="s", version=1, step=1, model_fingerprint="m",
                          tokenizer_fingerprint="t", format="safetensors-full", chunk_size=4, relays=relays,
                          fanout=fanout)


def test_a_chain_forwards_one_copy_per_node():
    m = manifest(1)
    assert topology.children(m, SRC.peer_id) == ["sn1r0"]
    assert topology.children(m, "sn1r3") == ["sn1r4"] and topology.children(m, "sn1r6") == []
    assert topology.upstream(m, "sn1r0") == [SRC.peer_id]
    assert topology.upstream(m, "sn1r2") == ["sn1r1", "sn1r0", SRC.peer_id]
    assert topology.upstream(m, SRC.peer_id) == []


def test_a_binary_tree():
    m = manifest(2)  # positions: 0 source, 1..7 relays; parent of p is (p - 1) // 2
    assert topology.children(m, SRC.peer_id) == ["sn1r0", "sn1r1"]
    assert topology.children(m, "sn1r0") == ["sn1r2", "sn1r3"]  # positions 3, 4
    assert topology.children(m, "sn1r2") == ["sn1r6"]  # position 3: children 7 (r6) and 8 (none)
    assert topology.children(m, "sn1r3") == []  # position 4: 9, 10
    assert topology.children(m, "sn1r1") == ["sn1r4", "sn1r5"]
    assert topology.upstream(m, "sn1r6") == ["sn1r2", "sn1r0", SRC.peer_id]  # 7 -> 3 -> 1 -> 0


def test_the_star_is_the_source_sending_to_all():
    m = manifest(len(R))
    assert topology.children(m, SRC.peer_id) == R
    assert all(topology.upstream(m, r) == [SRC.peer_id] for r in R)


def test_late_followers_spread_over_the_listed_nodes_and_end_at_the_source():
    m = manifest(1)
    parents = {}
    for i in range(200):
        up = topology.upstream(m, f"sn1late{i}")
        assert up[-1] == SRC.peer_id
        parents[up[0]] = parents.get(up[0], 0) + 1
        assert topology.children(m, f"sn1late{i}") == []
    # Every listed node takes some: 25 each expected. The manifest's digest (its time, the key) changes
    # every run, so this is a draw: > 10 fails about 1 run in 400; >= 5 about 1 in 1.6 million.
    assert len(parents) == 8 and min(parents.values()) >= 5
    assert topology.upstream(m, "sn1late0") == topology.upstream(m, "sn1late0")  # everyone agrees


def test_those_who_fetch_from_a_node_include_the_children_of_a_child_they_skip():
    """A node behind NAT (skipped: reached only through a relay) is asked by nobody; its children
    ask the nearest node above it, which serves them as its own (node/broadcast/serve.py)."""
    behind_nat = {"sn1r1", "sn1r2"}.__contains__
    chain = manifest(1)  # src -> r0 -> r1 -> r2 -> r3 -> ...
    assert topology.fetchers(chain, "sn1r0", behind_nat) == ["sn1r1", "sn1r2", "sn1r3"]
    assert topology.fetchers(chain, "sn1r1", behind_nat) == ["sn1r2", "sn1r3"]  # (asked only when r0 fails)
    assert topology.fetchers(chain, "sn1r3", behind_nat) == ["sn1r4"]
    assert topology.fetchers(chain, "sn1r0", lambda p: False) == topology.children(chain, "sn1r0")
    tree = manifest(2)  # r0 -> r2, r3; r1 -> r4, r5; r2 -> r6
    assert topology.fetchers(tree, "sn1r0", {"sn1r2"}.__contains__) == ["sn1r2", "sn1r3", "sn1r6"]
    # every listed node below a skipped one has exactly one node it asks first, and that node counts it
    for m in (chain, tree):
        for child in R:
            first = next(p for p in topology.upstream(m, child) if not behind_nat(p))
            assert child in topology.fetchers(m, first, behind_nat)
