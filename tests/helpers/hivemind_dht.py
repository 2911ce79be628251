"""What the hivemind transport tests share: loopback DHT nodes, named identities whose DHT records
they sign, and a hostile host that indexes bodies under fresh keys (correctly signed: keys are free)."""

from __future__ import annotations

import time

from swarm_node.node.transport.hivemind.daemon import start_dht_node
from swarm_node.node.transport.hivemind.index_records import index_entry
from swarm_node.node.transport.hivemind.records import OwnerSignatureValidator, bootstrap_validator
from swarm_node.node.transport.hivemind.rollout_stream import handler_name as _handler_name
from swarm_node.node.transport.hivemind.transport import HivemindTransport
from swarm_node.protocol.identity import Identity

LOOPBACK = dict(host_maddrs=["/ip4/127.0.0.1/tcp/0"], use_relay=False, nat_port_map=False)


def _now_round() -> int:
    """The current round of the transports' clock (round_seconds 5). Read when a test starts, not
    at import: validators refuse entries of rounds more than 33 back, and the whole suite takes
    longer than that to reach these tests."""
    return int(time.time() // 5)


_IDS: dict[str, Identity] = {}


def ident(name: str) -> Identity:
    """One Ed25519 identity per name: the peer's DHT records are signed with it."""
    return _IDS.setdefault(name, Identity.generate())


def pid(name: str) -> str:
    """The peer id of ``name`` (the DHT validator only accepts those as subkeys)."""
    return ident(name).peer_id


async def _bootstrap():
    # As `swarm-node bootstrap` runs it: it refuses records their owners did not sign.
    node = await start_dht_node(initial_peers=[], retries=0, record_validator=bootstrap_validator(), **LOOPBACK)
    return node, [str(m) for m in await node.p2p.get_visible_maddrs()]


def _transport(peer_id: str, maddrs, **kw) -> HivemindTransport:
    signer = next(i for i in _IDS.values() if i.peer_id == peer_id)
    return HivemindTransport(swarm="t", publisher=peer_id, signer=signer, initial_peers=maddrs, join_retries=0,
                             **LOOPBACK, **kw)


async def _hostile_server(maddrs, reply: bytes, index: dict, rounds=None, keys=("hostile",)):
    """A peer that publishes an index record under each of ``keys`` (correctly signed: keys are
    free) and answers fetches with ``reply`` (raw); ``node.requests`` counts the fetches."""
    validator = OwnerSignatureValidator(ident(keys[0]))
    node = await start_dht_node(initial_peers=maddrs, retries=0, record_validator=validator, **LOOPBACK)
    node.requests = 0

    async def serve(info, reader, writer):
        node.requests += 1
        await reader.readexactly(8)
        writer.write(reply)
        await writer.drain()
        writer.close()

    await node.p2p.add_binary_stream_handler(_handler_name("t"), serve)
    await _store_entries(node, validator, index, rounds or (_now_round(),), keys)
    return node


async def _store_entries(node, validator, index: dict, rounds, keys, p2p: str | None = None) -> None:
    """Entries under each of ``keys`` pointing at ``p2p`` (default: this node's own host)."""
    from hivemind.utils import get_dht_time

    node.validator = validator
    for name in keys:
        validator.signer = ident(name)  # one host, many keys: the validator signs for each in turn
        for r in rounds:
            key, sub, value = index_entry("t", r, pid(name), p2p or node.p2p.peer_id.to_base58(), index["size"],
                                          index["sha256"])
            await node.store(key, value, get_dht_time() + 60, subkey=sub)
