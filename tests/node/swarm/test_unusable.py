"""Batches of nothing this node can use (every group of a task family it has not loaded): never
pooled, counted as dropped groups, not as rejections, passed on over gossip, and only a sustained
run of them from one sender backs it off, where the carrier backs off (node/swarm/unusable.py,
node/swarm/exchange.py)."""

from __future__ import annotations

from swarm_node.node.swarm.unusable import RUN_ROUNDS, UnusableRuns
from swarm_node.node.transport.base import Delivery
from swarm_node.node.transport.memory import MemoryHub
from swarm_node.protocol.codec import encode
from swarm_node.protocol.identity import Identity
from tests.helpers.exchange import batch, clock_at, envelope, make_exchange, record

UNKNOWN = "nosuchfamily_0123abcd"  # a well-formed family name nobody registered


def test_a_run_is_of_distinct_rounds_and_ends_with_a_usable_batch():
    runs = UnusableRuns(run_rounds=3)
    assert not runs.unusable("a", 10) and not runs.unusable("a", 10)  # one round, counted once
    assert runs.run_of("a") == 1
    assert not runs.unusable("a", 11)
    assert runs.unusable("a", 12) and runs.run_of("a") == 3  # three rounds in a row: back it off
    assert not runs.unusable("a", 12)  # the same round again: no second strike
    assert runs.unusable("a", 13)  # and at each new such round after (the carrier's back-off doubles)
    runs.usable("a")
    assert runs.run_of("a") == 0 and not runs.unusable("a", 14)
    assert runs.run_of("b") == 0 and not runs.unusable("b", 14)  # per sender


def test_fresh_keys_cannot_grow_the_ledger_past_its_limit_and_the_oldest_go_first():
    runs = UnusableRuns(run_rounds=2, limit=3)
    for k in range(10):
        runs.unusable(f"k{k}", 1)
    assert len(runs) == 3 and runs.run_of("k0") == 0 and runs.run_of("k9") == 1
    runs.unusable("k7", 2)  # heard again: kept ahead of k8 and k9
    runs.unusable("new", 1)
    assert runs.run_of("k7") == 2 and runs.run_of("k8") == 0


def _exchange():
    hub, me = MemoryHub(), Identity.generate()
    ex = make_exchange(hub, me, clock_at(10))
    distrusted: list[tuple[str, int]] = []
    ex.transport.distrust = lambda publisher, r: distrusted.append((publisher, r)) or True  # it backed off
    return ex, distrusted


def _unusable_delivery(peer: Identity, r: int, seq: int) -> Delivery:
    records = [record(f"{UNKNOWN}:{k}:1") for k in range(3)] + [record(f"{UNKNOWN}:9:1", (4, 5))]
    return Delivery(r, peer.peer_id, envelope(peer, encode(batch(peer, r, records)), seq=seq))


def test_the_gate_passes_a_batch_of_unknown_families_on_and_polling_it_counts_its_groups_not_a_rejection():
    """Other nodes may hold the family: over gossip it goes on (nodes sharing a dataset reach each
    other through nodes that lack it); here it is never pooled."""
    ex, distrusted = _exchange()
    d = _unusable_delivery(Identity.generate(), 10, 1)
    assert ex.gate(d) is True and not ex.stats.unusable_batches  # passed on; counted when polled
    assert ex.admit(d) == 0
    assert ex.stats.dropped_unknown_family == 4 and ex.stats.unusable_batches == 1
    assert not ex.stats.rejected and ex.status()["rejected_total"] == 0 and distrusted == []
    assert ex.stats.envelopes_in == 0 and len(ex.pool) == 0


def test_only_a_carrier_that_backs_off_is_counted_and_a_republished_round_is_not_struck_twice():
    ex, _ = _exchange()
    ex.transport.distrust = lambda publisher, r: False  # a push carrier: nothing to back off
    peer = Identity.generate()
    for k in range(RUN_ROUNDS + 1):
        ex.admit(_unusable_delivery(peer, 7 + k, 1 + k))
    assert ex.stats.unusable_batches == RUN_ROUNDS + 1 and ex.stats.unusable_backed_off == 0
    ex2, distrusted = _exchange()
    for k in range(RUN_ROUNDS):
        ex2.admit(_unusable_delivery(peer, 7 + k, 1 + k))
    for seq in (10, 11):  # the last round again (a restarted peer republishing): no new strike
        ex2.admit(_unusable_delivery(peer, 7 + RUN_ROUNDS - 1, seq))
    assert len(distrusted) == 1 and ex2.stats.unusable_backed_off == 1


def test_a_sustained_run_backs_the_sender_off_and_a_mixed_batch_keeps_its_usable_groups():
    ex, distrusted = _exchange()
    peer, other = Identity.generate(), Identity.generate()
    for k in range(RUN_ROUNDS - 1):
        assert ex.admit(_unusable_delivery(peer, 8 + k, 1 + k)) == 0
    assert distrusted == []  # a peer updating its data is not backed off for a round or two
    ex.admit(_unusable_delivery(other, 10, 1))  # another sender's run is its own
    assert ex.admit(_unusable_delivery(peer, 8 + RUN_ROUNDS - 1, RUN_ROUNDS)) == 0
    assert distrusted == [(peer.peer_id, 8 + RUN_ROUNDS - 1)] and ex.stats.unusable_backed_off == 1
    # A batch with one group of a known family keeps it (the rest dropped) and ends the run.
    mixed = [record(f"{UNKNOWN}:1:1"), record("arithmetic:1:1")]
    d = Delivery(11, peer.peer_id, envelope(peer, encode(batch(peer, 11, mixed)), seq=9))
    assert ex.admit(d) == 1 and ex.unusable.run_of(peer.peer_id) == 0
    assert ex.unusable.run_of(other.peer_id) == 1 and ex.stats.unusable_backed_off == 1
    assert not ex.stats.rejected


def test_a_bad_task_among_unknown_families_is_still_refused_as_bad_task():
    ex, distrusted = _exchange()
    peer = Identity.generate()
    records = [record(f"{UNKNOWN}:1:1"), record("arithmetic:1:99")]  # no such difficulty
    d = Delivery(10, peer.peer_id, envelope(peer, encode(batch(peer, 10, records)), seq=1))
    assert ex.admit(d) == 0
    assert ex.stats.rejected["bad_task"] == 1 and distrusted == [(peer.peer_id, 10)]  # a sender fault, at once
