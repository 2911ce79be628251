"""The held-out seed space: evaluation ids are fixed and inside it, training draws never land in
it (a draw that would is redrawn), and no id drawn before the space was reserved has changed."""

from __future__ import annotations

import random

import pytest

from swarm_node.protocol.task_id import MAX_SEED, TaskId
from swarm_node.rewards.errors import TaskError
from swarm_node.rewards.held_out import FIRST_HELD_OUT_SEED, HELD_OUT_SEEDS, held_out_ids, is_held_out
from swarm_node.rewards.registry import FAMILIES, make_task, sample_task_ids


def test_the_space_is_the_top_2_20_seeds():
    assert HELD_OUT_SEEDS == 2**20 and FIRST_HELD_OUT_SEED == MAX_SEED - 2**20 + 1
    assert is_held_out(MAX_SEED) and is_held_out(FIRST_HELD_OUT_SEED)
    assert not is_held_out(FIRST_HELD_OUT_SEED - 1) and not is_held_out(0)


def test_held_out_ids_are_fixed_per_family_with_cycling_difficulties():
    ids = held_out_ids(["arithmetic", "lists"], [1, 3], 3)
    assert [str(t) for t in ids] == [
        f"arithmetic:{MAX_SEED}:1", f"arithmetic:{MAX_SEED - 1}:3", f"arithmetic:{MAX_SEED - 2}:1",
        f"lists:{MAX_SEED}:1", f"lists:{MAX_SEED - 1}:3", f"lists:{MAX_SEED - 2}:1"]
    assert ids == held_out_ids(["arithmetic", "lists"], [1, 3], 3)  # a pure function
    assert held_out_ids(["lists", "lists"], [1], 2) == held_out_ids(["lists"], [1], 2)  # a family once
    # The last id the largest request asks, MAX_SEED - (2**20 - 1), is the space's first seed.
    assert MAX_SEED - (HELD_OUT_SEEDS - 1) == FIRST_HELD_OUT_SEED
    assert all(make_task(t).id == t for t in ids)  # real tasks


@pytest.mark.parametrize("args", [(["lists"], [1], 0), (["lists"], [1], HELD_OUT_SEEDS + 1), ([], [1], 1),
                                  ("lists", [1], 1), (["lists"], [], 1), (["lists"], [1], True)])
def test_held_out_ids_refuse_bad_arguments(args):
    with pytest.raises(TaskError):
        held_out_ids(*args)


class _Forced(random.Random):
    """A generator whose first seed draws are given (a draw landing in the held-out space is too
    rare to meet by chance: 2**-43)."""

    def __init__(self, seeds):
        super().__init__(0)
        self.forced = list(seeds)

    def randint(self, a, b):
        return self.forced.pop(0) if self.forced else super().randint(a, b)


def test_a_training_draw_in_the_held_out_space_is_redrawn():
    rng = _Forced([MAX_SEED, FIRST_HELD_OUT_SEED, 12345])
    [tid] = sample_task_ids(rng, 1, ["lists"], [1])
    assert tid == TaskId("lists", 12345, 1)
    rng = _Forced([FIRST_HELD_OUT_SEED - 1])  # the seed just below the space is a training seed
    assert sample_task_ids(rng, 1, ["lists"], [1])[0].seed == FIRST_HELD_OUT_SEED - 1


def test_training_draws_are_unchanged_and_never_held_out():
    # The draw before the space was reserved: family, seed, level from one generator, in order.
    old = random.Random(3)
    names = list(FAMILIES)
    expected = [TaskId(old.choice(names), old.randint(0, MAX_SEED), old.choice([1, 2])) for _ in range(300)]
    assert sample_task_ids(random.Random(3), 300, difficulties=[1, 2]) == expected
    assert not any(is_held_out(t.seed) for t in expected)
