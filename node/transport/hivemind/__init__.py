"""The public-swarm carrier: hivemind's DHT and p2p daemon, in one folder.

    transport.py       HivemindTransport: rollouts through an owner-signed, sharded DHT index
    daemon.py          starting (with retries) and stopping the DHT node and its p2p daemon
    nat.py             behind NAT: the p2p daemon's relay options, node and bootstrap side, and the
                       hint logged when a peer cannot be dialled
    dialback.py        whether a node's listening port is reachable from a peer: served by every
                       node, asked by ``swarm-node doctor``
    index.py           the index's keys, shards and levels (pure)
    size_estimate.py   the swarm's size from the shards read (pure)
    known_shards.py    at which level a reader looks for each publisher it knows (pure)
    records.py         the owner-signed DHT record validator
    index_records.py   reading and writing index entries
    fetcher.py         which entries to fetch, the downloads, what their outcomes cost
    fetch_budget.py    what a reader spends fetching per round, and what it judged (pure)
    strikes.py         publishers and hosts skipped after a bad body, and for how long (pure)
    served_hosts.py    the hosts that served a publisher a body matching its signed entry: the
                       only addresses vouched for as its own (pure, bounded)
    rollout_stream.py  the envelope stream: serving our own, downloading a peer's
    serve_slots.py     how many downloads a host serves at once, in all and per peer (pure)
    heartbeats.py      which heartbeats read from the DHT are news (pure)
    patches.py         fixes applied to hivemind 1.1.12 at import
    carrier.py         the weight broadcast's request/reply over p2p streams
    directory.py       the weight broadcast's manifest directory in the DHT
    bootstrap.py       ``swarm-node bootstrap``: a DHT peer that others join through
    bootstrap_watch.py a bootstrap missing from the routing table is pinged: a restarted one
                       learns the swarm again
    settings.py        the transport's arguments from the ``[swarm]`` config (imports no hivemind)

Imported only when selected: hivemind and py-libp2p cannot share a process.
"""
