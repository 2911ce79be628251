"""The swarm exchange: what a node publishes, what it admits from peers, and which peer groups it takes.

    exchange.py      SwarmExchange: publish, heartbeats, the receive task, committing what passed, status
    admission.py     what a peer's message must satisfy and the reason counted when it does not (pure);
                     turns a batch into admitted groups carrying the task, the caps and the tokenizer
                     verdict (``same_tokenizer``), decided once for the learner
    pool.py          PeerGroup / AdmittedGroup, the pool of admitted groups, its memory bounds, ``take``
    selection.py     which pooled groups a step takes: freshest or informative first, per-sender cap (pure)
    limits.py        the bounds on what a peer's messages can make the node read or remember
    verdicts.py      what the gossip gate found on a message that passed, until it is polled: a
                     message is checked once (bounded by entries, bytes and age; each used once)
    stats.py         the exchange's counters (per-peer ones bounded)
    unusable.py      senders of nothing this node can use (unknown task families), round after round:
                     when to back them off (pure, bounded)
    peer_work.py     the distinct rounds this node trained on each peer's groups with a gradient:
                     a peer's standing (``proven``), bounded but never closed to newcomers (pure)
    peer_cache.py    peers.json: verified peers ranked by that work, where a node finds the swarm
                     again when every bootstrap is gone
    clock_offset.py  this node's clock offset from its peers' signed timestamps (median), and when
                     a running node warns of it (``ClockWatch``)
    link.py          a transport wrapped with reconnect and back-off (the exchange's one way out)

It talks to peers through ``node.transport.Transport`` and knows no carrier: what a round is worth fetching is its own rule
(limits.py ``envelopes_wanted``), handed to the carrier with each poll.
"""
