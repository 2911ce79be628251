"""Who the peer cache keeps when keys are free (node/swarm/peer_cache.py, node/swarm/peer_work.py):
through a real exchange's pool and ``take``, verified heartbeats and ``keep_peer_cache``, a flood
of keys with a group each cannot push out peers trained on round after round, and a new honest
peer still gets in after more than 1,024 senders."""

from __future__ import annotations

import asyncio
import time

import pytest

from swarm_node.node.swarm.peer_cache import PeerCache, keep_peer_cache
from swarm_node.node.swarm.pool import AdmittedGroup
from swarm_node.node.transport.base import Delivery
from swarm_node.node.transport.memory import MemoryHub
from swarm_node.protocol.codec import encode
from swarm_node.protocol.identity import Identity
from swarm_node.protocol.messages import Announcement
from swarm_node.rewards.registry import make_task
from tests.helpers.exchange import TOK_FP, clock_at, envelope, make_exchange, record

TASK = "arithmetic:1:1"
ADDR = "/ip4/10.{}.{}.{}/tcp/4001/p2p/Qma1gXV82LENwR9EF5nq6Tnuzknm1cbUob5Hyxwk3xnHik"


def _addr(i: int) -> str:
    return ADDR.format(i >> 16 & 255, i >> 8 & 255, i & 255)


def _group(sender: Identity, r: int, task: str = TASK) -> AdmittedGroup:
    """A group with rewards that vary (a gradient), as admission leaves it."""
    recs = (record(task), record(task, (4, 5)))
    return AdmittedGroup(sender=sender.peer_id, round=r, policy_version=1, model_fingerprint="m",
                         tokenizer_fingerprint=TOK_FP, task_id=task, records=recs, task=make_task(task),
                         token_level=True, rewards=(0.0, 1.0))


def _heartbeat(ex, ident: Identity, r: int, i: int) -> None:
    ann = Announcement(sender=ident.peer_id, round=r, policy_version=1, model_fingerprint="m",
                       tokenizer_fingerprint=TOK_FP, created_at=time.time(), addrs=(_addr(i),))
    assert ex.admit_announcement(Delivery(-1, ident.peer_id, envelope(ident, encode(ann), seq=r + 1)))


def _train_on(ex, senders: list[tuple[int, Identity]], r: int) -> None:
    """Each sender's heartbeat verified and one of its groups taken by a step of round ``r``."""
    for i, ident in senders:
        _heartbeat(ex, ident, r, i)
        ex.pool.add(_group(ident, r))
    assert len(ex.take(len(senders), r)) == len(senders)


def _refresh(ex, cache: PeerCache) -> None:
    """What a node does on close: ``keep_peer_cache`` notes and saves the cache once more."""
    async def go():
        task = asyncio.ensure_future(keep_peer_cache(ex, cache, 3600.0))
        await asyncio.sleep(0)
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)

    asyncio.run(go())


@pytest.mark.parametrize("flood_rounds", [1, 3])
def test_a_flood_of_fresh_keys_does_not_evict_peers_with_ten_rounds_of_history(tmp_path, flood_rounds):
    """10 honest peers trained on in 10 rounds, then 200 fresh keys, each trained on once (or in 3
    rounds, past the bar to get in) and heard since: the cache (64 peers) keeps every honest one,
    and a join tries them first."""
    me = Identity.generate()
    ex = make_exchange(MemoryHub(), me, clock_at(100))
    cache = PeerCache(tmp_path / "peers.json", me).load()
    honest = [(i, Identity.generate()) for i in range(10)]
    for r in range(1, 11):
        _train_on(ex, honest, r)
    _refresh(ex, cache)
    flood = [(1000 + i, Identity.generate()) for i in range(200)]
    for r in range(11, 11 + flood_rounds):
        _train_on(ex, flood, r)
    _refresh(ex, cache)
    kept = PeerCache(tmp_path / "peers.json", me).load()
    assert {i.peer_id for _, i in honest} <= set(kept.peers)
    assert set(kept.addrs()[:len(honest)]) == {_addr(i) for i, _ in honest}  # one address each, tried first


def test_a_new_honest_peer_gets_in_after_more_than_1024_senders(tmp_path):
    """1,100 keys each trained on once (the per-peer counters of stats.py hold 1,024 and sum the
    rest), then a newcomer trained on in 3 rounds: it gets into the cache."""
    me = Identity.generate()
    ex = make_exchange(MemoryHub(), me, clock_at(100))
    cache = PeerCache(tmp_path / "peers.json", me).load()
    senders = [(i, Identity.generate()) for i in range(1100)]
    for r, start in enumerate(range(0, 1100, 100), start=1):
        _train_on(ex, senders[start:start + 100], r)
    newcomer = (5000, Identity.generate())
    for r in (20, 21, 22):
        _train_on(ex, [newcomer], r)
    _refresh(ex, cache)
    assert PeerCache(tmp_path / "peers.json", me).load().peers[newcomer[1].peer_id]["addrs"] == [_addr(5000)]


def test_the_work_ledger_stays_bounded_and_open_to_newcomers():
    """The ledger's own bound: a flood of one-round keys past it displaces its own kind, never a
    peer with 10 rounds, and the newest sender always has an entry."""
    from swarm_node.node.swarm.peer_work import PeerWork
    from swarm_node.node.transport.work_ledger import PEER_WORK, WorkRule

    w = PeerWork(WorkRule(rounds=PEER_WORK.rounds, limit=50, idle=PEER_WORK.idle))
    for r in range(1, 11):
        w.trained("sn1old", r)
    w.trained("sn1old", 10)  # the same round again counts once
    w.trained("sn1flat", 11, informative=False)  # all rewards equal: no gradient, no work
    for i in range(500):
        w.trained(f"sn1key{i}", 11 + i // 10)
        assert w.get(f"sn1key{i}") == 1
    w.trained("sn1new", 100)
    w.trained("sn1new", 101)
    assert len(w) == 50 and w.get("sn1old") == 10 and w.get("sn1new") == 2 and w.get("sn1flat") == 0


def test_groups_labelled_two_rounds_taken_in_one_step_count_one_round_of_work(tmp_path):
    """The work count is of this node's rounds, not the sender's labels: before, a fresh key whose
    groups labelled r-1 and r were taken by one step (the ``weakest`` rule takes the older label
    first when its family is the weaker) had 2 rounds of work, the peer cache's MIN_ROUNDS, after a
    single step."""
    me, fresh = Identity.generate(), Identity.generate()
    ex = make_exchange(MemoryHub(), me, clock_at(100), max_sender_share=1.0, select="weakest")
    cache = PeerCache(tmp_path / "peers.json", me).load()
    _heartbeat(ex, fresh, 10, 7)
    ex.pool.add(_group(fresh, 9, "lists:1:1"))  # a family this node is weak at
    ex.pool.add(_group(fresh, 10))
    taken = ex.take(2, 10, weakness={"lists": 0.1, "arithmetic": 0.9})
    assert [g.round for g in taken] == [9, 10]
    assert ex.work.get(fresh.peer_id) == 1
    _refresh(ex, cache)
    assert fresh.peer_id not in PeerCache(tmp_path / "peers.json", me).load().peers
