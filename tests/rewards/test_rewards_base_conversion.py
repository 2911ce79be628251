"""base family: answers checked with int(x, base), ranges per level, normalizer."""

import re

import pytest

from swarm_node.rewards.families.base_conversion import FAMILY, to_base
from swarm_node.rewards.registry import make_task
from swarm_node.rewards.task import TaskId

SEEDS = range(200)
TO_RE = re.compile(r"([0-9]+) to base ([0-9]+)")
FROM_RE = re.compile(r"([0-9a-f]+) from base ([0-9]+)")
LEVELS = {
    1: ({2}, 7),
    2: ({2}, 31),
    3: ({2, 8}, 255),
    4: ({2, 3, 8, 16}, 1023),
    5: (set(range(2, 17)) - {10}, 65535),
}


def tasks(level):
    return [make_task(TaskId("base", seed, level)) for seed in SEEDS]


def canonical(digits):
    return digits == "0" or not digits.startswith("0")


@pytest.mark.parametrize("level", range(1, 6))
def test_answer_matches_int_parsing(level):
    bases, high = LEVELS[level]
    directions = set()
    for task in tasks(level):
        if match := TO_RE.fullmatch(task.question):
            directions.add("to")
            value, base = int(match[1]), int(match[2])
            assert int(task.answer, base) == value, task.question
            assert canonical(task.answer)
        else:
            match = FROM_RE.fullmatch(task.question)
            assert match, task.question
            directions.add("from")
            digits, base = match[1], int(match[2])
            value = int(task.answer)
            assert int(digits, base) == value, task.question
            assert canonical(digits) and task.answer == str(value)
        assert base in bases and 0 <= value <= high
    assert directions == {"to", "from"}


def test_to_base_examples():
    assert to_base(13, 2) == "1101"
    assert to_base(0, 7) == "0"
    assert to_base(255, 16) == "ff"
    assert all(int(to_base(v, b), b) == v for v in range(300) for b in range(2, 17))


@pytest.mark.parametrize(
    ("given", "truth"), [("1101", "1101"), ("01101", "1101"), (" FF ", "ff"), ("000", "0")]
)
def test_normalize_accepts(given, truth):
    assert FAMILY.normalize(given) == FAMILY.normalize(truth)


@pytest.mark.parametrize(
    ("given", "truth"), [("1100", "1101"), ("1 101", "1101"), ("0b1101", "1101"), ("", "0")]
)
def test_normalize_rejects(given, truth):
    assert FAMILY.normalize(given) != FAMILY.normalize(truth)
