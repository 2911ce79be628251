"""The swarm exchange: what a node publishes, what it admits from peers, and which peer groups it takes.

    exchange.py    SwarmExchange: publish, heartbeats, the receive task, committing what passed, status
    admission.py   what a peer's message must satisfy and the reason counted when it does not (pure);
                   turns a batch into admitted groups carrying the task, the caps and the tokenizer
                   verdict (``same_tokenizer``), decided once for the learner
    pool.py        PeerGroup / AdmittedGroup, the pool of admitted groups, its memory bounds, ``take``
    selection.py   which pooled groups a step takes: freshest or informative first, per-sender cap (pure)
    limits.py      the bounds on what a peer's messages can make the node read or remember
    verdicts.py    what the gossip gate found on a message that passed, until it is polled: a
                   message is checked once (bounded by entries, bytes and age; each used once)
    stats.py       the exchange's counters (per-peer ones bounded)
    unusable.py    senders of nothing this node can use (unknown task families), round after round:
                   when to back them off (pure, bounded)
    link.py        a transport wrapped with reconnect and back-off (the exchange's one way out)

It talks to peers only through ``node.transport.Transport``; it knows no carrier.
"""
