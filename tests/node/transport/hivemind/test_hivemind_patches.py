"""node/transport/hivemind/patches.py: each hivemind flaw, shown on hivemind's own classes.

Every test runs twice: ``patched`` (as the node runs) and ``unpatched`` (hivemind's original
functions put back for the test), which must show the flaw. The unpatched case fails when a
hivemind release fixes the flaw, and then the patch can go.
"""

from __future__ import annotations

import asyncio
import types

import pytest
from hivemind.dht.node import DHTNode
from hivemind.dht.protocol import DHTProtocol
from hivemind.dht.routing import DHTID
from hivemind.dht.storage import DHTLocalStorage, DictionaryDHTValue
from hivemind.dht.validation import DHTRecord, RecordValidatorBase
from hivemind.utils import MSGPackSerializer, get_dht_time, timed_storage
from hivemind.utils.timed_storage import TimedStorage

from swarm_node.node.transport.hivemind import patches as hivemind_patches

pytestmark = pytest.mark.daemon

LOOPBACK = dict(host_maddrs=["/ip4/127.0.0.1/tcp/0"], use_relay=False, nat_port_map=False, auto_nat=False)
REFUSED = MSGPackSerializer.dumps("refused by the strict node")


class RefuseMarker(RecordValidatorBase):
    """A strict node's rule that a lenient replica does not have: refuse one marker value."""

    def validate(self, record: DHTRecord) -> bool:
        return record.value != REFUSED


@pytest.fixture(params=["patched", "unpatched"])
def patched(request, monkeypatch) -> bool:
    assert hivemind_patches.APPLIED == set(hivemind_patches.ORIGINALS)  # all applied on this version
    assert len(hivemind_patches.APPLIED) == 4
    if request.param == "unpatched":
        for qualname, original in hivemind_patches.ORIGINALS.items():
            owner = {"DHTProtocol": DHTProtocol, "TimedStorage": TimedStorage,
                     "DHTNode": DHTNode}[qualname.split(".")[0]]
            monkeypatch.setattr(owner, qualname.split(".")[1], original)
    return request.param == "patched"


@pytest.fixture
def clock(monkeypatch):
    """TimedStorage's clock (the module global its methods read), moved by hand."""
    now = types.SimpleNamespace(t=1_000_000.0)
    monkeypatch.setattr(timed_storage, "get_dht_time", lambda: now.t)
    return now


def test_apply_is_idempotent():
    before = dict(vars(DHTProtocol)), TimedStorage.store
    assert hivemind_patches.apply() is hivemind_patches.APPLIED
    assert (dict(vars(DHTProtocol)), TimedStorage.store) == before
    assert TimedStorage.store is hivemind_patches._store  # not wrapped twice


# ---- 1. one refused subkey must not discard the dictionary ------------------------------------


def _dictionary(now: float) -> DictionaryDHTValue:
    d = DictionaryDHTValue()
    d.store("alice", MSGPackSerializer.dumps("alice's entry"), now + 30)
    d.store("mallory", REFUSED, now + 50)  # later, so it is also the dictionary's latest expiration
    return d


def test_validate_dictionary_drops_only_the_refused_subkey(patched):
    now = get_dht_time()
    protocol = types.SimpleNamespace(record_validator=RefuseMarker(), serializer=DHTProtocol.serializer)
    d = _dictionary(now)
    ok = DHTProtocol._validate_dictionary(protocol, b"key", d)
    if not patched:
        assert ok is False  # hivemind: the whole dictionary is refused
        return
    assert ok is True
    assert dict(d.items()) == {"alice": (MSGPackSerializer.dumps("alice's entry"), now + 30)}
    assert d.latest_expiration_time == now + 30  # not mallory's
    # None valid: refused, as before; no subkeys at all: accepted, as before.
    only_bad = DictionaryDHTValue()
    only_bad.store("mallory", REFUSED, now + 50)
    assert DHTProtocol._validate_dictionary(protocol, b"key", only_bad) is False
    assert DHTProtocol._validate_dictionary(protocol, b"key", DictionaryDHTValue()) is True
    # No validator: untouched.
    d = _dictionary(now)
    assert DHTProtocol._validate_dictionary(types.SimpleNamespace(record_validator=None), b"key", d) is True
    assert set(dict(d.items())) == {"alice", "mallory"}


async def _start(**kw) -> DHTNode:
    return await DHTNode.create(initial_peers=kw.pop("initial_peers", None), **LOOPBACK, **kw)


async def _stop(*nodes: DHTNode) -> None:
    for node in nodes:
        try:
            await asyncio.wait_for(node.shutdown(), 10)
        except (asyncio.TimeoutError, ConnectionError, OSError):
            await asyncio.wait_for(node.p2p.shutdown(), 10)


def test_lookup_keeps_valid_subkeys_from_a_replica_holding_a_refused_one(patched):
    """A lenient replica holds alice's entry and one the reader refuses: the reader still gets
    alice's, with alice's expiration (the refused entry's later one would make it look fresher)."""

    async def go():
        now = get_dht_time()
        replica = await _start()  # no validator: accepts the marker
        reader = None
        try:
            await replica.store("round-7", "alice's entry", now + 30, subkey="alice")
            await replica.store("round-7", "refused by the strict node", now + 50, subkey="mallory")
            maddrs = [str(m) for m in await replica.p2p.get_visible_maddrs()]
            # client_mode: the reader stores nothing itself, so all it gets comes from the replica
            reader = await _start(initial_peers=maddrs, client_mode=True, record_validator=RefuseMarker())
            return now, await reader.get("round-7", latest=True)
        finally:
            await _stop(*[n for n in (reader, replica) if n is not None])

    now, found = asyncio.run(go())
    if not patched:
        assert found is None  # hivemind: alice's entry is censored by mallory's
        return
    assert found is not None
    assert {k: v.value for k, v in found.value.items()} == {"alice": "alice's entry"}
    assert found.expiration_time == now + 30  # exact: a double end to end


def test_a_replica_stores_the_valid_subkeys_of_a_dictionary_it_is_handed(patched):
    """How a newcomer is handed keys (update_routing_table) or a lookup is cached nearby: as a
    whole dictionary. One refused subkey must not make the strict node drop the rest."""

    async def go():
        now = get_dht_time()
        lenient = await _start()
        strict = None
        try:
            maddrs = [str(m) for m in await lenient.p2p.get_visible_maddrs()]
            strict = await _start(initial_peers=maddrs, record_validator=RefuseMarker())
            key_id = DHTID.generate(source="round-7")
            ok = await lenient.protocol.call_store(strict.peer_id, [key_id], [_dictionary(now)], [now + 50])
            held = strict.protocol.storage.get(key_id)
            return ok, None if held is None else dict(held.value.items())
        finally:
            await _stop(*[n for n in (strict, lenient) if n is not None])

    ok, held = asyncio.run(go())
    if not patched:
        assert ok == [False] and held is None
        return
    assert ok == [True]  # store_ok reports the kept part
    assert set(held) == {"alice"}


# ---- 2. a refused older store must not schedule the current value's deletion ------------------


def test_refused_older_store_does_not_expire_the_current_value_early(patched, clock):
    s = TimedStorage()
    t = clock.t
    assert s.store("k", "A", t + 100)
    assert s.store("k", "B", t + 1) is False  # older: refused, both with and without the patch
    assert s.get("k") == ("A", t + 100)
    clock.t = t + 2  # past B's expiration, long before A's
    if not patched:
        assert s.get("k") is None  # hivemind: B's heap entry deleted A
        return
    assert s.get("k") == ("A", t + 100)
    assert s.top() == ("k", ("A", t + 100))
    clock.t = t + 101
    assert s.get("k") is None and len(s) == 0  # A still expires at its own time


def test_replayed_heartbeat_does_not_delete_the_refreshed_one(patched, clock):
    """The DHT form of it: a peer's subkey refreshed (later expiration), then its previous
    record replayed (validly signed, still unexpired): refused, and the refresh must survive."""
    storage, key = DHTLocalStorage(), DHTID.generate(source="heartbeats")
    t = clock.t
    assert storage.store_subkey(key, "alice", b"beat-1", t + 10)
    assert storage.store_subkey(key, "alice", b"beat-2", t + 60)  # refresh
    assert storage.store_subkey(key, "alice", b"beat-1", t + 10) is False  # replay
    clock.t = t + 11
    held = dict(storage.get(key).value.items())
    if not patched:
        assert held == {}  # hivemind: the replay deleted the refresh
        return
    assert held == {"alice": (b"beat-2", t + 60)}


def test_store_semantics_are_otherwise_unchanged(patched, clock):
    t = clock.t
    s = TimedStorage()
    assert s.store("k", "past", t - 1) is False  # already expired
    assert s.store("k", "A", t + 10)
    assert s.store("k", "same expiration", t + 10) is False
    assert s.store("k", "C", t + 20)  # newer replaces
    assert s.get("k") == ("C", t + 20)
    clock.t = t + 15
    assert s.get("k") == ("C", t + 20)
    clock.t = t + 21
    assert s.get("k") is None
    # maxsize: the entry expiring first is evicted
    s = TimedStorage(maxsize=2)
    assert s.store("a", 1, t + 30) and s.store("b", 2, t + 40) and s.store("c", 3, t + 50)
    assert sorted(k for k, _ in s.items()) == ["b", "c"]
    # frozen (how a received dictionary is unpacked): expired entries are kept
    with s.freeze():
        assert s.store("old", 0, t - 5)
        assert "old" in s


# ---- 3. a finished lookup must leave no key behind ---------------------------------------------


def test_finished_lookups_leave_no_pending_entry(patched):
    """Every key a node ever looked up stayed in ``pending_get_requests`` (an empty set, ~2 KB):
    a swarm node reads new keys every round. Lookups found here, found nowhere, and two at once
    of one key (the second served by the first's answer, as before) must leave nothing."""

    async def go():
        node = await _start()
        try:
            now = get_dht_time()
            for i in range(10):
                assert await node.store(f"held-{i}", i, now + 60)
            found = await node.get_many([f"held-{i}" for i in range(10)] + [f"absent-{i}" for i in range(10)],
                                        sufficient_expiration_time=float("inf"))
            together = await asyncio.gather(node.get("held-0", latest=True), node.get("held-0"))
            return found, together, len(node.pending_get_requests)
        finally:
            await _stop(node)

    found, together, pending = asyncio.run(go())
    assert [found[f"held-{i}"].value for i in range(10)] == list(range(10))
    assert all(found[f"absent-{i}"] is None for i in range(10))
    assert [r.value for r in together] == [0, 0]
    if not patched:
        assert pending == 20  # hivemind: one empty entry per key ever looked up
        return
    assert pending == 0
