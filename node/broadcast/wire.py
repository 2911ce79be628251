"""The broadcast's requests and replies between two nodes: what goes through the carrier.

Requests are msgpack lists; a reply is a status code and a body::

    ["o", manifest bytes]      an offer: "this version exists"    -> OK
    ["m", digest]              the manifest named by its digest    -> OK + manifest | UNKNOWN
    ["n", source id]           newest manifest held of a source    -> OK + manifest | UNKNOWN
    ["c", digest, index]       a chunk                             -> OK + bytes | NOT_YET | UNKNOWN

Any of them may be answered BUSY (past a request budget or out of serve slots) or BAD_REQUEST.
Serving (serve.py) reads them; fetching (fetch.py) and offering (peer.py) write them.
"""

from __future__ import annotations

import msgpack

from swarm_node.node.transport.carrier import MAX_REQUEST
from swarm_node.protocol.manifest import MAX_MANIFEST_BYTES, Manifest, encode_manifest

OK, NOT_YET, UNKNOWN, BAD_REQUEST, BUSY = 0, 1, 2, 3, 4


def offer_request(m: Manifest) -> bytes:
    return msgpack.packb(["o", encode_manifest(m)])


def manifest_request(digest: bytes) -> bytes:
    return msgpack.packb(["m", digest])


def newest_request(source: str) -> bytes:
    return msgpack.packb(["n", source])


def chunk_request(digest: bytes, i: int) -> bytes:
    return msgpack.packb(["c", digest, i])


def parse_request(request: bytes) -> list | None:
    """The decoded request (``[kind, ...]``), or None for bytes that are not one: too long, not
    msgpack, or past the bounds a request can need (hostile bytes cost no more than that)."""
    if len(request) > MAX_REQUEST:
        return None
    try:
        req = msgpack.unpackb(request, raw=False, max_bin_len=MAX_MANIFEST_BYTES, max_array_len=4,
                              max_map_len=0, max_ext_len=0)
        req[0]
    except Exception:  # hostile bytes: any msgpack failure is a bad request
        return None
    return req
