"""A gossip verdict cached by digest (node/swarm/verdicts.py): a message the gate passed is checked
once, what time or state may have changed is checked again when it is polled, and the cache stays
bounded whatever passes the gate and is never polled."""

from __future__ import annotations

import asyncio
import collections
import threading
import time
import types

import pytest

import swarm_node.protocol.signing as signing
from swarm_node.node.swarm.admission import Admission, Admitted, Refused
from swarm_node.node.swarm.verdicts import MAX_VERDICTS, VerdictCache
from swarm_node.node.transport.base import Delivery
from swarm_node.node.transport.memory import MemoryHub
from swarm_node.protocol.codec import encode
from swarm_node.protocol.identity import Identity
from swarm_node.protocol.messages import Announcement
from tests.helpers.exchange import TOK_FP, batch, clock_at, envelope, make_exchange


@pytest.fixture
def setup(monkeypatch):
    """An exchange at round 10 (max_round_lag 4, clock window 30 + 5 x 10 = 80 s), a peer, and the
    costly checks counted: ``check_batch`` calls and the verifier's signature checks."""
    hub, me, peer = MemoryHub(), Identity.generate(), Identity.generate()
    ex = make_exchange(hub, me, clock_at(10))
    calls = collections.Counter()
    check_batch = Admission.check_batch

    def counting_check(self, *a, **kw):
        calls["check_batch"] += 1
        return check_batch(self, *a, **kw)

    signed = ex.verifier._check_signed

    def counting_signed(env):
        calls["signature"] += 1
        return signed(env)

    monkeypatch.setattr(Admission, "check_batch", counting_check)
    monkeypatch.setattr(ex.verifier, "_check_signed", counting_signed)
    return hub, peer, ex, calls


def gated(ex, d: Delivery) -> bool:
    """``gate`` as gossipsub runs it: in a worker thread, a refusal counted on the loop."""
    async def go():
        ex._loop = asyncio.get_running_loop()
        passed = await asyncio.to_thread(ex.gate, d)
        await asyncio.sleep(0)  # the refusal's count, scheduled from the thread
        return passed
    return asyncio.run(go())


def test_a_message_gated_then_polled_is_checked_once(setup):
    hub, peer, ex, calls = setup
    data = envelope(peer, encode(batch(peer, 10)))  # three records, two tasks: two groups
    hub.put("s", 10, peer.peer_id, data, time.time() + 60)
    assert gated(ex, Delivery(10, peer.peer_id, data))
    assert calls == {"check_batch": 1, "signature": 1} and len(ex.verdicts) == 1
    assert asyncio.run(ex.poll_once()) == 2  # polled through admit_off_loop: the gate's verdict reused
    assert calls == {"check_batch": 1, "signature": 1}
    assert ex.stats.envelopes_in == 1 and ex.stats.rejected == {}
    assert ex.verdicts.counts == {"stored": 1, "hits": 1} and len(ex.verdicts) == 0
    # The verifier still gives one verdict per check, as before the cache: the gate's and the poll's.
    assert ex.verifier.counts == {"ACCEPTED": 2}
    assert ex.status()["verdicts"]["rollouts"] == {"stored": 1, "hits": 1}


def test_without_a_gate_every_message_is_checked_in_full(setup):
    hub, peer, ex, calls = setup  # the memory hub forwards nothing: no gate runs
    assert ex.admit(Delivery(10, peer.peer_id, envelope(peer, encode(batch(peer, 10))))) == 2
    assert calls == {"check_batch": 1, "signature": 1} and ex.verdicts.counts == {"misses": 1}


def test_the_same_message_after_admission_is_still_a_replay_or_a_duplicate(setup):
    hub, peer, ex, calls = setup
    d = Delivery(10, peer.peer_id, envelope(peer, encode(batch(peer, 10)), seq=1))
    assert gated(ex, d) and gated(ex, d)  # two copies before the poll: one verdict, stored twice
    assert ex.admit(d) == 2
    assert ex.admit(d) == 0  # the verdict was used once: the second copy is checked in full
    assert not gated(ex, d)  # and gossiped again later, it stops at the gate
    assert ex.stats.rejected == {"replay": 2} and ex.stats.envelopes_in == 1
    assert calls["check_batch"] == 4  # two gates, the second copy's admit, the third gate
    # Another envelope of the sender for the same round, gated before the first was admitted:
    # its cached verdict is re-checked against what was admitted since.
    second = Delivery(10, peer.peer_id, envelope(peer, encode(batch(peer, 10)), seq=2))
    ex2 = make_exchange(MemoryHub(), Identity.generate(), ex.clock)
    first = Delivery(10, peer.peer_id, envelope(peer, encode(batch(peer, 10)), seq=3))
    assert gated(ex2, first) and gated(ex2, second)
    assert ex2.admit(first) == 2 and ex2.admit(second) == 0
    assert ex2.stats.rejected == {"duplicate_round": 1} and ex2.verdicts.counts["hits"] == 2


def test_a_verdict_whose_round_went_stale_is_dropped_as_stale(setup):
    hub, peer, ex, calls = setup
    d = Delivery(10, peer.peer_id, envelope(peer, encode(batch(peer, 10))))
    assert gated(ex, d)
    ex.clock = clock_at(15)  # five rounds later: round 10 < 15 - 4 is out of the window
    assert ex.admit(d) == 0
    # As uncached: dropped, not rejected, its two groups counted stale; nothing checked again.
    assert ex.stats.dropped_stale == 2 and ex.stats.rejected == {} and ex.stats.envelopes_in == 0
    assert calls["check_batch"] == 1 and ex.verdicts.counts["hits"] == 1
    fresh = make_exchange(MemoryHub(), Identity.generate(), clock_at(15))
    assert fresh.admit(d) == 0 and fresh.stats.dropped_stale == 2 and fresh.stats.rejected == {}


def test_a_verdict_whose_envelope_left_the_clock_window_is_refused_as_uncached(setup, monkeypatch):
    hub, peer, ex, calls = setup
    signed_at = time.time() - 60  # 60 s old: inside the 80 s window at the gate
    d = Delivery(10, peer.peer_id, envelope(peer, encode(batch(peer, 10, created_at=signed_at)), now=signed_at))
    assert gated(ex, d)
    uncached = make_exchange(MemoryHub(), Identity.generate(), ex.clock)
    # 30 s pass for the verifiers (the round clock is left alone): 90 s old, outside the window.
    real = time.time
    monkeypatch.setattr(signing, "time", types.SimpleNamespace(time=lambda: real() + 30))
    assert ex.admit(d) == 0 and uncached.admit(d) == 0
    assert ex.stats.rejected == uncached.stats.rejected == {"stale_clock": 1}
    assert calls["check_batch"] == 2 and ex.verdicts.counts["hits"] == 1  # the gate's, and uncached's


def test_recheck_runs_what_time_and_state_change_in_check_batch_order():
    """``Admission.recheck`` by hand, at a chosen round and verifier time: the reasons and details
    ``check_batch`` gives on the same bytes then."""
    ex, peer = make_exchange(MemoryHub(), Identity.generate(), clock_at(10)), Identity.generate()
    now = time.time()
    d = Delivery(10, peer.peer_id, envelope(peer, encode(batch(peer, 10)), now=now))
    adm, v = ex.admission, ex.verifier  # window 80 s
    admitted = adm.check_batch(d, v, 10, set())
    assert isinstance(admitted, Admitted)

    def both(current, batches=frozenset(), at=now):
        again = adm.recheck(admitted, v, current, set(batches), now=at)
        full = adm.check_batch(d, types.SimpleNamespace(verify=lambda e, commit: v.verify(e, at, commit=commit)),
                               current, set(batches))
        return [(r.reason, r.detail) if isinstance(r, Refused) else "admitted" for r in (again, full)]

    assert both(10) == ["admitted", "admitted"]
    assert both(10, at=now + 81) == [("stale_clock", "")] * 2
    assert both(8) == [("wrong_round", "batch says round 10")] * 2  # the clock stepped back two rounds
    assert both(10, {(peer.peer_id, 10)}) == [("duplicate_round", "")] * 2
    assert both(15) == [("stale", "2")] * 2  # two tasks
    assert v.commit(admitted.envelope, now)
    assert both(10) == [("replay", "")] * 2


def test_bytes_that_differ_by_one_bit_miss(setup):
    hub, peer, ex, calls = setup
    data = envelope(peer, encode(batch(peer, 10)))
    assert gated(ex, Delivery(10, peer.peer_id, data))
    flipped = data[:-1] + bytes([data[-1] ^ 1])  # the signature's last bit
    assert ex.admit(Delivery(10, peer.peer_id, flipped)) == 0
    assert ex.stats.rejected == {"bad_signature": 1} and calls["check_batch"] == 2
    assert ex.verdicts.counts == {"stored": 1, "misses": 1} and len(ex.verdicts) == 1
    assert ex.verdicts.pop(Delivery(9, peer.peer_id, data)) is None  # another round
    assert ex.verdicts.pop(Delivery(10, Identity.generate().peer_id, data)) is None  # another publisher
    assert ex.verdicts.pop(Delivery(10, peer.peer_id, data)) is not None


def test_a_flood_of_gated_messages_never_polled_stays_under_the_bounds():
    """300 peers' batches pass the gate and none is polled (the inbox dropped them, say): the
    cache holds the newest MAX_VERDICTS (256), the 44 oldest evicted."""
    ex = make_exchange(MemoryHub(), Identity.generate(), clock_at(10))
    peers = [Identity.generate() for _ in range(300)]
    ds = [Delivery(10, p.peer_id, envelope(p, encode(batch(p, 10)))) for p in peers]
    for d in ds:
        assert ex.gate(d)
    assert MAX_VERDICTS == 256 and len(ex.verdicts) == 256 and ex.verdicts.counts == {"stored": 300, "evicted": 44}
    assert ex.verdicts.bytes == sum(len(d.data) for d in ds[44:])
    assert ex.buffer_sizes()["verdicts"] == 256
    assert ex.verdicts.max_age_s == 20.0  # and none kept past two rounds of 10 s
    assert ex.admit(ds[0]) == 2 and ex.verdicts.counts["misses"] == 1  # evicted: checked in full, still admitted
    assert ex.admit(ds[-1]) == 2 and ex.verdicts.counts["hits"] == 1


def test_the_cache_is_bounded_by_entries_bytes_and_age():
    t = [0.0]
    cache = VerdictCache[str](max_entries=5, max_bytes=3000, max_age_s=20.0, clock=lambda: t[0])
    d = [Delivery(1, f"p{i}", bytes([i]) * 1000) for i in range(10)]
    for i in range(10):  # 1000 bytes each: three fit the bytes, though five fit the count
        cache.put(d[i], f"v{i}")
        assert len(cache) <= 3 and cache.bytes <= 3000
    assert cache.counts == {"stored": 10, "evicted": 7} and cache.bytes == 3000
    small = [Delivery(1, f"q{i}", bytes([i])) for i in range(10)]
    for i in range(10):  # 1 byte each: the count binds
        cache.put(small[i], f"s{i}")
    # The first small one pushes a big one out (bytes), the fourth and fifth the other two
    # (count), each of the last five the oldest small one.
    assert len(cache) == 5 and cache.bytes == 5 and cache.counts["evicted"] == 7 + 8
    cache.put(Delivery(1, "big", b"x" * 3001), "too big")  # more than the whole cache: not kept
    assert len(cache) == 5 and cache.pop(Delivery(1, "big", b"x" * 3001)) is None
    t[0] = 15.0
    cache.put(d[0], "late")  # a sixth entry: the oldest small one makes room
    assert cache.counts["evicted"] == 7 + 8 + 1
    t[0] = 20.5  # the four small ones left are 20.5 s old, past max_age_s: let go without a poll
    cache.expire()
    assert len(cache) == 1 and cache.counts["expired"] == 4 and cache.bytes == 1000
    assert cache.pop(d[0]) == "late" and cache.pop(d[0]) is None  # used once
    assert len(cache) == 0 and cache.bytes == 0


def test_the_cache_loses_nothing_across_threads():
    cache = VerdictCache[int](max_entries=10_000, max_bytes=1 << 30, max_age_s=60.0)
    barrier = threading.Barrier(8)
    got = collections.Counter()
    lock = threading.Lock()

    def worker(k):
        mine = [Delivery(k, "p", i.to_bytes(4, "big")) for i in range(200)]
        barrier.wait()
        for i, d in enumerate(mine):
            cache.put(d, k * 1000 + i)
        found = [cache.pop(d) for d in mine]
        with lock:
            got[k] = sum(f == k * 1000 + i for i, f in enumerate(found))

    threads = [threading.Thread(target=worker, args=(k,)) for k in range(8)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    assert got == {k: 200 for k in range(8)}
    assert cache.counts == {"stored": 1600, "hits": 1600} and len(cache) == 0 and cache.bytes == 0


def test_a_heartbeat_gated_then_polled_is_opened_once():
    ex, peer = make_exchange(MemoryHub(), Identity.generate(), clock_at(5)), Identity.generate()
    signed = collections.Counter()
    real = ex.verifier._check_signed
    ex.verifier._check_signed = lambda e: signed.update(["n"]) or real(e)
    ann = Announcement(sender=peer.peer_id, round=5, policy_version=2, model_fingerprint="m",
                       tokenizer_fingerprint=TOK_FP, created_at=time.time(), addrs=())
    d = Delivery(-1, peer.peer_id, envelope(peer, encode(ann)))
    assert gated(ex, d) and signed["n"] == 1
    assert ex.admit_announcement(d) and signed["n"] == 1  # the gate's opening reused
    assert ex.peers[peer.peer_id].policy_version == 2
    assert ex.heartbeat_verdicts.counts == {"stored": 1, "hits": 1}
    assert not ex.admit_announcement(d) and ex.stats.rejected == {"replay": 1}  # checked in full: a replay
    assert signed["n"] == 2 and ex.verifier.counts == {"ACCEPTED": 2, "REPLAY": 1}
