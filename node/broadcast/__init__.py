"""The peer-assisted pipelined weight broadcast (ECHO-2 style): how followers get a source's weights.

    protocol/manifest.py   the signed manifest (wire format, checks, replay guard)
    topology.py            who receives from whom: a pure function of the manifest
    peer.py                one node's part: what it holds; it publishes, serves and fetches
    serve.py               answering other nodes: manifests, and chunks held or still arriving
    fetch.py               following a source: take its new versions, fetch and verify their chunks
    transfer.py            a version held or in flight, and the broadcast's counters
    wire.py                the requests and replies between two nodes
    store.py               chunks and manifests on disk, so a restart resumes
    follow.py              a source publishing its policy's versions; a follower keeping up

The bytes move through a carrier and a directory that each transport hands out
(node/transport/carrier.py and directory.py define them; each carrier folder implements them):
the broadcast knows no carrier. What a node does with it (``broadcast.role``: full, learner,
worker) is the round loop's: node/run/roles.py. docs/broadcast.md describes the whole; scripts/bench_broadcast.py
measures it.
"""
