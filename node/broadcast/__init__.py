"""The peer-assisted pipelined weight broadcast (ECHO-2 style): how followers get a source's weights.

    protocol/manifest.py   the signed manifest (wire format, checks, replay guard)
    topology.py            who receives from whom: a pure function of the manifest
    peer.py                one node's part: serve held versions, fetch and verify followed ones
    store.py               chunks and manifests on disk, so a restart resumes
    bucket.py              the upload cap (token bucket)
    carrier.py             the one thing asked of a transport (request/reply), and an in-memory one
    hivemind_carrier.py    the same over hivemind's p2p streams

docs/broadcast.md describes the whole; scripts/bench_broadcast.py measures it.
"""
