"""arithmetic family: answers checked with Python's own evaluator, level shapes, normalizer."""

import re

import pytest

from swarm_node.rewards.families.arithmetic import FAMILY
from swarm_node.rewards.registry import make_task
from swarm_node.rewards.task import TaskId

SEEDS = range(200)


def tasks(level):
    return [make_task(TaskId("arithmetic", seed, level)) for seed in SEEDS]


@pytest.mark.parametrize("level", range(1, 6))
def test_answer_matches_python_eval(level):
    for task in tasks(level):
        assert task.question.endswith("=")
        expression = task.question[:-1]
        assert re.fullmatch(r"[0-9+\-*()]+", expression), task.question
        assert int(task.answer) == eval(expression), task.question  # test-only eval
        assert task.answer == str(int(task.answer))


def operands(question):
    return [int(x) for x in re.findall(r"[0-9]+", question)]


def test_level_shapes():
    for task in tasks(1):
        assert re.fullmatch(r"[0-9]\+[0-9]=", task.question)
    for task in tasks(2):
        assert re.fullmatch(r"[0-9]{2}[+-][0-9]{2}=", task.question)
    for task in tasks(3):
        assert task.question.count("*") == 1 and len(operands(task.question)) == 3
    for task in tasks(4):
        assert len(operands(task.question)) == 3
        assert all(10 <= x <= 99 for x in operands(task.question))
    for task in tasks(5):
        assert all(100 <= x <= 999 for x in operands(task.question))
    assert any("(" in task.question for task in tasks(5))


def test_magnitude_grows():
    means = [sum(abs(int(t.answer)) for t in tasks(level)) / len(SEEDS) for level in (1, 2, 4, 5)]
    assert means == sorted(means)


def test_negative_answers_occur():
    assert any(task.answer.startswith("-") for task in tasks(2))


@pytest.mark.parametrize(
    ("given", "truth"),
    [(" 8 ", "8"), ("+8", "8"), ("008", "8"), ("-0", "0"), ("-12", "-12")],
)
def test_normalize_accepts_equivalent_integers(given, truth):
    assert FAMILY.normalize(given) == FAMILY.normalize(truth)


@pytest.mark.parametrize(("given", "truth"), [("9", "8"), ("8.0", "8"), ("1 2", "12"), ("", "0")])
def test_normalize_rejects_other_values(given, truth):
    assert FAMILY.normalize(given) != FAMILY.normalize(truth)
