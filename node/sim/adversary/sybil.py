"""A Sybil: one DHT node that signs index entries for many keys and serves their bodies.

The flood, honest-address, oversized and far-expiry attacks write through it; it answers body
requests in the transport's own framing (node/transport/hivemind/rollout_stream.py), for many keys.
"""

from __future__ import annotations

import asyncio

from swarm_node.node.transport.hivemind.rollout_stream import handler_name, read_request, write_body
from swarm_node.protocol.identity import Identity


class SybilNode:
    """One DHT node (and p2p daemon) that writes owner-signed index entries for many keys and
    serves their bodies: the real bytes for ``outbox`` entries, bytes that fail the sha256 for
    ``junk`` ones. Its validator signs a record when its subkey is one of its keys (one
    ``OwnerSignatureValidator`` per key) and otherwise checks records as an honest node does."""

    def __init__(self, swarm: str, round_seconds: float, max_round_lag: int, dht_kwargs: dict):
        # max_round_lag is unused (the swarm's record validator takes none); callers still pass it.
        self.swarm = swarm
        self.round_seconds = round_seconds
        self.dht_kwargs = dht_kwargs
        self.node = None
        self.signer = None
        self.outbox: dict[tuple[int, str], bytes] = {}  # (round, peer id) -> envelope
        self.junk: dict[tuple[int, str], int] = {}  # (round, peer id) -> bytes to answer with
        self.served = 0

    async def start(self) -> None:
        from hivemind.dht.validation import CompositeValidator

        from swarm_node.node.transport.hivemind.records import CLOCK_SLACK_S, MAX_RECORD_TTL_S, OwnerSignatureValidator
        from swarm_node.node.transport.hivemind.index_records import SwarmRecordValidator
        from swarm_node.node.transport.hivemind.daemon import start_dht_node

        class _ManyKeys(OwnerSignatureValidator):
            """Signs for each of several keys: a record whose subkey is one of their peer ids."""

            def __init__(self):
                super().__init__(None, only_peer_records=True, max_ttl_s=MAX_RECORD_TTL_S + CLOCK_SLACK_S)
                self.by_id: dict[str, OwnerSignatureValidator] = {}

            def add(self, ident: Identity) -> None:
                self.by_id[ident.peer_id] = OwnerSignatureValidator(signer=ident)

            def forget(self, peer_id: str) -> None:
                self.by_id.pop(peer_id, None)

            def sign_value(self, record):
                from hivemind.dht.protocol import DHTProtocol

                try:
                    subkey = DHTProtocol.serializer.loads(record.subkey)
                except Exception:  # noqa: BLE001
                    return record.value
                v = self.by_id.get(subkey) if isinstance(subkey, str) else None
                return v.sign_value(record) if v is not None else record.value

        self.signer = _ManyKeys()
        schema = SwarmRecordValidator(self.swarm, self.round_seconds)
        # As an honest replica checks records (it is one): only owner-signed entries, in shape.
        self.node = await start_dht_node(record_validator=CompositeValidator([self.signer, schema]), retries=2,
                                         **self.dht_kwargs)
        await self.node.p2p.add_binary_stream_handler(handler_name(self.swarm), self._serve)

    @property
    def p2p_id(self) -> str:
        return self.node.p2p.peer_id.to_base58()

    def add(self, ident: Identity) -> None:
        self.signer.add(ident)

    async def _serve(self, info, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            r, asked = await read_request(reader)  # the transport's own framing (rollout_stream.py)
            data = self.outbox.get((r, asked))
            if data is None and (r, asked) in self.junk:
                data = b"\0" * self.junk[(r, asked)]  # the declared size, not the announced sha256
            if data is None:
                return
            await write_body(writer, data)
            self.served += 1
        except (asyncio.TimeoutError, asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()

    def prune(self, oldest: int) -> None:
        for k in [k for k in self.outbox if k[0] < oldest]:
            del self.outbox[k]
        for k in [k for k in self.junk if k[0] < oldest]:
            del self.junk[k]

    async def put(self, entries: list[tuple[str, str, object, float]]) -> tuple[int, int]:
        """Store (key, subkey, value, expiration) entries at once; returns (kept, refused)."""
        if not entries:
            return 0, 0
        keys, subkeys, values, exps = map(list, zip(*entries))
        ok = await self.node.store_many(keys, values, exps, subkeys=subkeys, exclude_self=True)
        kept = sum(bool(ok.get((k, s))) for k, s in zip(keys, subkeys))
        return kept, len(entries) - kept

    async def close(self) -> None:
        if self.node is not None:
            from swarm_node.node.transport.hivemind.daemon import stop_dht_node

            await stop_dht_node(self.node)
            self.node = None
