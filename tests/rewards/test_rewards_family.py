"""The Family record: difficulty validation and delegation to its generator/normalizer."""

import random

import pytest

from swarm_node.rewards.errors import InvalidTaskId
from swarm_node.rewards.families.family import Family


def make_family():
    return Family(
        name="toy",
        max_difficulty=2,
        description="toy family",
        generator=lambda rng, difficulty: (f"q{difficulty}", str(rng.randint(0, 9))),
        normalizer=str.strip,
    )


def test_generate_delegates():
    family = make_family()
    assert family.generate(random.Random(1), 2) == family.generate(random.Random(1), 2)
    assert family.generate(random.Random(1), 1)[0] == "q1"
    assert family.normalize(" x ") == "x"


@pytest.mark.parametrize("difficulty", [0, 3, -1, 1.0, True, "1"])
def test_generate_rejects_bad_difficulty(difficulty):
    with pytest.raises(InvalidTaskId) as info:
        make_family().generate(random.Random(1), difficulty)
    assert repr(difficulty) in str(info.value)
    assert "'toy'" in str(info.value) and "1..2" in str(info.value)


def test_family_is_frozen():
    with pytest.raises(AttributeError):
        make_family().name = "other"  # type: ignore[misc]
