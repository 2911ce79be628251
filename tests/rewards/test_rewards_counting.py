"""counting family: answers recomputed with str methods, level sizes, normalizer."""

import re

import pytest

from swarm_node.rewards.families.counting import FAMILY
from swarm_node.rewards.registry import make_task
from swarm_node.rewards.task import TaskId

SEEDS = range(200)
LEVELS = {1: (1, 3, "ab"), 2: (3, 5, "abc"), 3: (5, 8, "abcdef"), 4: (8, 12, "abcdefghijklm")}


def tasks(level):
    return [make_task(TaskId("counting", seed, level)) for seed in SEEDS]


def subject(question):
    return question.split(" ")[-1]


@pytest.mark.parametrize("level", range(1, 6))
def test_answer_matches_str_methods(level):
    ops = set()
    for task in tasks(level):
        text = subject(task.question)
        assert re.fullmatch(r"[a-z]+", text)
        if match := re.fullmatch(r"count ([a-z]) in [a-z]+", task.question):
            ops.add("count")
            assert task.answer == str(text.count(match[1]))
        elif task.question.startswith("len "):
            ops.add("len")
            assert task.answer == str(len(text))
        else:
            assert task.question.startswith("rev ")
            ops.add("rev")
            assert task.answer == text[::-1]
    assert ops == {"count", "len", "rev"}


def test_lengths_and_letters_per_level():
    for level, (low, high, letters) in LEVELS.items():
        for task in tasks(level):
            text = subject(task.question)
            assert low <= len(text) <= high and set(text) <= set(letters)
    assert all(12 <= len(subject(task.question)) <= 16 for task in tasks(5))


def test_count_answers_are_not_mostly_zero():
    counts = [t.answer for t in tasks(4) if t.question.startswith("count")]
    assert sum(answer != "0" for answer in counts) > len(counts) / 2


def test_normalize():
    assert FAMILY.normalize(" CBA ") == FAMILY.normalize("cba")
    assert FAMILY.normalize("03") == FAMILY.normalize("3")
    assert FAMILY.normalize("c b a") != FAMILY.normalize("cba")
