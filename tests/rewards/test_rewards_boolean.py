"""boolean family: answers checked by Python evaluation, level shapes, normalizer."""

import re

import pytest

from swarm_node.rewards.families.boolean import FAMILY
from swarm_node.rewards.registry import make_task
from swarm_node.rewards.task import TaskId

SEEDS = range(200)


def tasks(level):
    return [make_task(TaskId("boolean", seed, level)) for seed in SEEDS]


def python_value(question):
    words = question.replace("(", " ").replace(")", " ").split()
    assert set(words) <= {"t", "f", "and", "or", "not"}, question
    source = re.sub(r"\bt\b", "True", re.sub(r"\bf\b", "False", question))
    return eval(source)  # test-only eval on a checked t/f/and/or/not string


@pytest.mark.parametrize("level", range(1, 6))
def test_answer_matches_python(level):
    answers = set()
    for task in tasks(level):
        assert task.answer in ("t", "f")
        answers.add(task.answer)
        assert (task.answer == "t") == python_value(task.question), task.question
    assert answers == {"t", "f"}


def literal_count(question):
    return len(re.findall(r"\b[tf]\b", question))


def test_level_shapes():
    for level, literals in {1: {1, 2}, 2: {2, 3}, 3: {3}, 4: {4}, 5: {5}}.items():
        for task in tasks(level):
            assert literal_count(task.question) in literals, task.question
    for task in tasks(1):
        operators = len(re.findall(r"\b(and|or|not)\b", task.question))
        assert operators == 1 and "(" not in task.question
    assert any("(" in task.question for task in tasks(3))
    assert all("not" in task.question for task in tasks(5))


@pytest.mark.parametrize("word", ["t", "T", "true", "True", "TRUE", " 1 "])
def test_normalize_true_synonyms(word):
    assert FAMILY.normalize(word) == "t"


@pytest.mark.parametrize("word", ["f", "F", "false", "False", "0"])
def test_normalize_false_synonyms(word):
    assert FAMILY.normalize(word) == "f"


@pytest.mark.parametrize("word", ["yes", "tf", "", "t f"])
def test_normalize_other_words_match_neither(word):
    assert FAMILY.normalize(word) not in ("t", "f")
