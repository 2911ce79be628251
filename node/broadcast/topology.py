"""Who forwards a weight version to whom: a pure function of the signed manifest.

Position 0 is the source, positions 1..n the manifest's relays in order; the node at position p
receives from position (p - 1) // fanout. ``fanout`` 1 is a chain: every node uploads one copy,
so with every upload capped at U a version of S bytes in chunks of c reaches everyone in about
S/U + (n - 1)·c/U, against n·S/U for the source sending to each follower (``fanout`` n, a
star). A tree of fanout f has depth log_f n but each relay uploads f copies, ~f·S/U: it wins
only when the chain's per-hop latency, not the upload, is the limit. Equal capped uploads are
the case we measure (scripts/bench_broadcast.py), so the default is a chain; a source may sign
a bigger fanout for long swarms (the chain's tail is n hops from the source).

A follower not in the manifest (it announced after the source cut the version) hangs as a leaf
under a listed node chosen by a hash of its id and the manifest, so late joiners spread over the
relays instead of all asking the source. If its parent fails, a node asks the next node up
(the parent's parent ... the source): each of them holds every chunk the parent could have
had, so a relay that vanishes mid-transfer is routed around. A listed node that nobody can
fetch from (behind NAT, reached only through a relay) is skipped the same way, and the node its
children ask instead counts them as its own (``fetchers``).
"""

from __future__ import annotations

import hashlib
from typing import Callable

from swarm_node.protocol.manifest import Manifest

__all__ = ["position", "parent_index", "upstream", "children", "fetchers"]


def position(m: Manifest, peer: str) -> int | None:
    """0 for the source, 1.. for relays in order; None for a peer the manifest does not list."""
    if peer == m.source:
        return 0
    try:
        return m.relays.index(peer) + 1
    except ValueError:
        return None


def parent_index(p: int, fanout: int) -> int:
    return (p - 1) // fanout


def _nodes(m: Manifest) -> list[str]:
    return [m.source, *m.relays]


def upstream(m: Manifest, peer: str) -> list[str]:
    """Whom ``peer`` asks for chunks, in order: its parent first, then up to the source."""
    nodes = _nodes(m)
    p = position(m, peer)
    if p == 0:
        return []
    if p is None:  # a late follower: a leaf under a listed node picked by hash (spreads the load)
        h = int.from_bytes(hashlib.sha256(m.digest + peer.encode()).digest()[:8], "big")
        p_parent = h % len(nodes)
        chain = [p_parent]
    else:
        chain = [parent_index(p, m.fanout)]
    while chain[-1] != 0:
        chain.append(parent_index(chain[-1], m.fanout))
    return [nodes[i] for i in chain]


def children(m: Manifest, peer: str) -> list[str]:
    """The listed nodes that receive from ``peer`` (late followers are not listed)."""
    p = position(m, peer)
    if p is None:
        return []
    nodes = _nodes(m)
    first = p * m.fanout + 1
    return nodes[first:first + m.fanout]


def fetchers(m: Manifest, peer: str, skipped: Callable[[str], bool]) -> list[str]:
    """The listed nodes that ask ``peer`` first: its children, and below a child that is
    ``skipped`` (reached only through a circuit relay: its own children ask past it, to the nearest
    node above that is not), that child's children, and so on down. ``peer``'s own children
    wait for its serve slots; everyone else shares a few with strangers (node/broadcast/serve.py)."""
    out, todo = [], list(children(m, peer))
    while todo:
        child = todo.pop(0)
        out.append(child)
        if skipped(child):
            todo.extend(children(m, child))
    return out
