"""Round task ids: deterministic, stratified over families, regenerable from the id alone."""

from __future__ import annotations

from collections import Counter

from swarm_node.node.run.rollouts import round_task_ids
from swarm_node.rewards.registry import make_task

FAMILIES = ["arithmetic", "lists", "base", "boolean", "counting"]


def test_round_task_ids_are_a_pure_function_of_seed_and_step():
    a = round_task_ids(7, 3, 8, FAMILIES, [1, 2])
    assert a == round_task_ids(7, 3, 8, FAMILIES, [1, 2])
    assert a != round_task_ids(7, 4, 8, FAMILIES, [1, 2])
    assert a != round_task_ids(8, 3, 8, FAMILIES, [1, 2])
    assert all(t.difficulty in (1, 2) for t in a)
    assert make_task(str(a[0])) == make_task(a[0])  # any node regenerates it from the id string


def test_families_are_stratified_within_and_across_rounds():
    # 8 slots over 5 families: every round has each family once or twice...
    for step in range(10):
        counts = Counter(t.family for t in round_task_ids(0, step, 8, FAMILIES, [1]))
        assert set(counts) == set(FAMILIES) and set(counts.values()) <= {1, 2}
    # ...and 5 rounds of 8 give each family exactly 8 slots.
    total = Counter(t.family for s in range(5) for t in round_task_ids(0, s, 8, FAMILIES, [1]))
    assert set(total.values()) == {8}


def test_a_family_listed_twice_gets_twice_the_share():
    total = Counter(t.family for s in range(6) for t in round_task_ids(0, s, 6, ["boolean", "boolean", "lists"], [1]))
    assert total == {"boolean": 24, "lists": 12}


def test_a_round_never_asks_a_held_out_task():
    from swarm_node.rewards.held_out import held_out_ids, is_held_out

    ids = [t for step in range(50) for t in round_task_ids(0, step, 8, FAMILIES, [1, 2])]
    assert not any(is_held_out(t.seed) for t in ids)
    assert not set(ids) & set(held_out_ids(FAMILIES, [1, 2], 64))
