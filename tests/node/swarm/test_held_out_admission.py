"""A peer cannot make a node train on its held-out evaluation tasks: a batch naming a task id of
the held-out seed space is refused whole, as ``held_out_task``, a sender fault."""

from __future__ import annotations

from swarm_node.node.swarm.admission import REJECT_REASONS, SENDER_FAULTS
from swarm_node.node.transport.base import Delivery
from swarm_node.node.transport.memory import MemoryHub
from swarm_node.protocol.codec import encode
from swarm_node.protocol.identity import Identity
from swarm_node.rewards.held_out import FIRST_HELD_OUT_SEED, held_out_ids
from tests.helpers.exchange import batch, clock_at, envelope, make_exchange, record


def test_a_batch_with_a_held_out_task_is_refused_whole_and_counted():
    hub, me, peer = MemoryHub(), Identity.generate(), Identity.generate()
    ex = make_exchange(hub, me, clock_at(10))
    eval_id = str(held_out_ids(["arithmetic"], [1], 1)[0])  # the first task every node evaluates on
    records = [record("arithmetic:1:1"), record(eval_id), record("lists:2:1")]
    assert ex.admit(Delivery(10, peer.peer_id, envelope(peer, encode(batch(peer, 10, records))))) == 0
    assert ex.stats.rejected == {"held_out_task": 1}
    assert ex.available(10) == 0  # the honest-looking groups of the same batch are refused too
    # The lowest seed of the space too, in a later round.
    low = record(f"lists:{FIRST_HELD_OUT_SEED}:1")
    assert ex.admit(Delivery(11, peer.peer_id, envelope(peer, encode(batch(peer, 11, [low])), seq=2))) == 0
    assert ex.stats.rejected == {"held_out_task": 2}
    # One seed below the space is a training task like any other.
    ok = record(f"lists:{FIRST_HELD_OUT_SEED - 1}:1")
    assert ex.admit(Delivery(10, peer.peer_id, envelope(peer, encode(batch(peer, 10, [ok])), seq=3))) == 1


def test_held_out_task_is_a_sender_fault():
    # An honest node never draws such a seed (rewards/registry.py redraws it), so the carrier may back off its sender.
    assert "held_out_task" in REJECT_REASONS and "held_out_task" in SENDER_FAULTS


def test_a_group_asking_a_held_out_question_under_another_seed_is_dropped_not_refused():
    """Seeds are not questions: a peer (hostile or honest, with other evaluation settings) can
    send a training seed whose question this node evaluates on. That group is dropped and counted;
    the rest of the batch is admitted and the sender is not at fault."""
    import random

    from swarm_node.protocol.task_id import TaskId
    from swarm_node.rewards.reserved import held_out_set

    held = held_out_set(["arithmetic"], [1], 16)
    rng = random.Random(1)
    same_question = next(t for t in (TaskId("arithmetic", rng.randint(0, 2**62), 1) for _ in range(100_000))
                         if held.holds_id(t))
    other = next(t for t in (TaskId("arithmetic", rng.randint(0, 2**62), 1) for _ in range(1000))
                 if not held.holds_id(t))
    hub, me, peer = MemoryHub(), Identity.generate(), Identity.generate()
    records = [record(str(same_question)), record(str(other)), record("lists:2:1")]
    guarded = make_exchange(hub, me, clock_at(10), held_out=held.holds)
    assert guarded.admit(Delivery(10, peer.peer_id, envelope(peer, encode(batch(peer, 10, records))))) == 2
    assert not guarded.stats.rejected and guarded.stats.dropped_held_out == 1
    assert guarded.status()["dropped_held_out"] == 1
    assert {g.task_id for g in guarded.pool.groups.values()} == {str(other), "lists:2:1"}
    # Without the reservation the same batch gives all three groups.
    plain = make_exchange(MemoryHub(), me, clock_at(10))
    assert plain.admit(Delivery(10, peer.peer_id, envelope(peer, encode(batch(peer, 10, records))))) == 3
