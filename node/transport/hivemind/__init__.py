"""The public-swarm carrier: hivemind's DHT and p2p daemon, in one folder.

    transport.py      HivemindTransport: rollouts through an owner-signed, sharded DHT index
    daemon.py         starting (with retries) and stopping the DHT node and its p2p daemon
    index.py          the index's keys, shards and levels (pure)
    size_estimate.py  the swarm's size from the shards read (pure)
    records.py        the owner-signed DHT record validator
    index_records.py  reading and writing index entries
    fetcher.py        which entries to fetch, the downloads, what their outcomes cost
    fetch_budget.py   what a reader spends fetching per round, and what it judged (pure)
    strikes.py        publishers and hosts skipped after a bad body, and for how long (pure)
    rollout_stream.py the envelope stream: serving our own, downloading a peer's
    heartbeats.py     which heartbeats read from the DHT are news (pure)
    patches.py        fixes applied to hivemind 1.1.12 at import
    carrier.py        the weight broadcast's request/reply over p2p streams
    directory.py      the weight broadcast's manifest directory in the DHT
    bootstrap.py      ``swarm-node bootstrap``: a DHT peer that others join through
    settings.py       the transport's arguments from the ``[swarm]`` config (imports no hivemind)

Imported only when selected: hivemind and py-libp2p cannot share a process.
"""
