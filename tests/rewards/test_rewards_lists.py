"""lists family: answers recomputed with Python built-ins, level sizes, normalizer."""

import pytest

from swarm_node.rewards.families.lists import FAMILY
from swarm_node.rewards.registry import make_task
from swarm_node.rewards.task import TaskId

SEEDS = range(200)
REFERENCE = {
    "sort": lambda xs: sorted(xs),
    "rev": lambda xs: list(reversed(xs)),
    "max": lambda xs: [max(xs)],
    "min": lambda xs: [min(xs)],
    "sum": lambda xs: [sum(xs)],
}


def tasks(level):
    return [make_task(TaskId("lists", seed, level)) for seed in SEEDS]


def parse(question):
    op, *items = question.split(" ")
    return op, [int(x) for x in items]


@pytest.mark.parametrize("level", range(1, 6))
def test_answer_matches_builtins(level):
    ops = set()
    for task in tasks(level):
        op, xs = parse(task.question)
        ops.add(op)
        assert [int(x) for x in task.answer.split(" ")] == REFERENCE[op](xs), task.question
        assert task.answer == " ".join(str(x) for x in REFERENCE[op](xs))
    assert ops == set(REFERENCE)


def test_sizes_and_values_grow():
    bounds = {1: (2, 3, 0, 9), 2: (3, 4, 0, 9), 3: (4, 5, 0, 19), 4: (5, 6, 0, 99)}
    for level, (min_len, max_len, low, high) in bounds.items():
        for task in tasks(level):
            _, xs = parse(task.question)
            assert len(xs) <= max_len and all(low <= x <= high for x in xs)
            if task.question.split()[0] in ("max", "min", "sum"):
                assert len(xs) >= min_len
    assert any(x < 0 for task in tasks(5) for x in parse(task.question)[1])
    assert max(len(parse(task.question)[1]) for task in tasks(5)) == 8


@pytest.mark.parametrize("given", ["1 2 3", " 1  2 3 ", "1,2,3", "[1, 2, 3]", "(1,2,3)", "01 2 +3"])
def test_normalize_accepts_presentation_variants(given):
    assert FAMILY.normalize(given) == FAMILY.normalize("1 2 3")


@pytest.mark.parametrize("given", ["1 3 2", "123", "1 2", "1 2 3 4", ""])
def test_normalize_rejects_other_lists(given):
    assert FAMILY.normalize(given) != FAMILY.normalize("1 2 3")


def test_normalize_negative_items():
    assert FAMILY.normalize("-3, 5") == FAMILY.normalize("-3 5")
