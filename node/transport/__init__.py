"""Transports: how a node's signed envelopes and weight chunks reach its peers.

    base.py           Transport, the interface the node runtime talks to; Delivery, TransportError
    memory.py         in one process through a MemoryHub (unit tests, fast simulation)
    faulty.py         latency, jitter and partitions wrapped around any transport (``sim``)
    inbox.py          what a push carrier delivered, held until the node polls
    ratelimit.py      token buckets: the upload cap, request budgets, the gossip check budget's share
                      for strangers
    standing.py       which publishers have an admitted history (sustained work, in the receiver's
                      rounds, bounded): the fast path of every carrier (pure)
    work_ledger.py    the one ledger of sustained work and its three rules side by side (vouching,
                      the exchange's peer work, a learner's followers): counted, bounded (pure)
    backoff.py        waiting between tries: the back-off schedule and the join retry loop
    join.py           how a carrier that joins through peers finds its swarm: the bootstraps, then
                      the peer cache, with back-off; which of them answered (``found_via``)
    addresses.py      addresses that name their peer (``.../p2p/<id>``), and the parsing of a
                      multiaddr's host and port (a peer's text strictly, a user's leniently)
    carrier.py        what the weight broadcast asks of a carrier (one request, one reply)
    directory.py      what a weights directory is (the source's pointer, its followers)
    carriers.py       what each carrier is (in one process, through a bootstrap peer, at a broker...):
                      the table callers ask instead of comparing names, with its lazy loaders
    from_config.py    the selected carrier's transport, built from the ``[swarm]`` config
    bootstrap_serve.py  what every bootstrap peer does once up, whatever its carrier
    port_free.py      whether a TCP port can still be listened on, checked before a bootstrap starts
    hivemind/ libp2p/ mqtt/   one folder per carrier: its transport, host or link, broadcast
                      carrier and directory, bootstrap, and its arguments from the config (settings.py)

A carrier is imported only when selected (``create_transport``): hivemind and py-libp2p register
the same protobuf symbols and cannot share one process, and MQTT needs neither. No carrier imports
another.
"""

from swarm_node.node.transport.base import Delivery, Transport, TransportError

__all__ = ["Delivery", "Transport", "TransportError", "create_transport"]


def create_transport(kind: str, **kwargs) -> Transport:
    """A transport by config name (``swarm.transport``), imported lazily (node/transport/carriers.py)."""
    # Imported here: a package-level name ``carrier`` would be the submodule carrier.py once imported.
    from swarm_node.node.transport.carriers import carrier

    return carrier(kind).load_transport()(**kwargs)
