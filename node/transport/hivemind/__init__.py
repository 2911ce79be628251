"""The public-swarm carrier: hivemind's DHT and p2p daemon, in one folder.

    transport.py      HivemindTransport: rollouts through an owner-signed, sharded DHT index
    index.py          the index's keys, shards and levels (pure)
    records.py        the owner-signed DHT record validator
    index_records.py  reading and writing index entries
    patches.py        fixes applied to hivemind 1.1.12 at import
    carrier.py        the weight broadcast's request/reply over p2p streams
    directory.py      the weight broadcast's manifest directory in the DHT
    bootstrap.py      ``swarm-node bootstrap``: a DHT peer that others join through

Imported only when selected: hivemind and py-libp2p cannot share a process.
"""
