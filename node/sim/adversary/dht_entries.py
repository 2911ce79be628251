"""DHT records as the hivemind transport writes them: where the DHT attacks put theirs.

The layout is the transport's own (``index_entry``, ``heartbeat_entry``, ``shard_prefix``), imported
when first used so that the envelope attacks run without loading hivemind.
"""

from __future__ import annotations

LEVELS = (0, 1)  # shard levels written: where readers of a swarm of up to ~500 peers read


def index_entries(swarm: str, round: int, peer_id: str, p2p: str, size: int, sha256: str,
                  levels: tuple[int, ...] | None = None) -> list[tuple[str, str, object]]:
    """(key, subkey, value) of ``peer_id``'s index entry for ``round``, as the transport writes
    it: one per shard level in ``levels`` (default ``LEVELS``: where readers of a swarm of this
    size read)."""
    from swarm_node.node.transport.hivemind.index import MAX_LEVEL, shard_prefix
    from swarm_node.node.transport.hivemind.index_records import index_entry

    return [index_entry(swarm, round, peer_id, p2p, int(size), sha256, prefix=shard_prefix(peer_id, lv))
            for lv in (LEVELS if levels is None else levels) if lv in range(MAX_LEVEL + 1)]


def heartbeat_entries(swarm: str, peer_id: str, data: bytes,
                      levels: tuple[int, ...] | None = None) -> list[tuple[str, str, object]]:
    """(key, subkey, value) of ``peer_id``'s heartbeat, at each shard level."""
    from swarm_node.node.transport.hivemind.index import MAX_LEVEL, shard_prefix
    from swarm_node.node.transport.hivemind.index_records import heartbeat_entry

    return [heartbeat_entry(swarm, peer_id, bytes(data), prefix=shard_prefix(peer_id, lv))
            for lv in (LEVELS if levels is None else levels) if lv in range(MAX_LEVEL + 1)]
