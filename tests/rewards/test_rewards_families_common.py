"""Properties every family must keep: length limits, character set, growing difficulty."""

import statistics

import pytest

from swarm_node.rewards.registry import FAMILIES, make_task
from swarm_node.rewards.task import ALPHABET, MAX_ANSWER_CHARS, MAX_QUESTION_CHARS, TaskId

SEEDS = range(300)


def tasks(name, level):
    return [make_task(TaskId(name, seed, level)) for seed in SEEDS]


@pytest.mark.parametrize("name", list(FAMILIES))
def test_lengths_and_alphabet(name):
    for level in range(1, FAMILIES[name].max_difficulty + 1):
        for task in tasks(name, level):
            assert 0 < len(task.question) <= MAX_QUESTION_CHARS, task
            assert 0 < len(task.answer) <= MAX_ANSWER_CHARS, task
            assert set(task.question) <= ALPHABET, task
            assert set(task.answer) <= ALPHABET, task
            assert task.answer == task.answer.strip() and task.question == task.question.strip()


@pytest.mark.parametrize("name", list(FAMILIES))
def test_ground_truth_is_its_own_normal_form(name):
    family = FAMILIES[name]
    for level in range(1, family.max_difficulty + 1):
        for task in tasks(name, level)[:50]:
            assert family.normalize(task.answer) == task.answer, task


@pytest.mark.parametrize("name", list(FAMILIES))
def test_difficulty_grows(name):
    levels = range(1, FAMILIES[name].max_difficulty + 1)
    question_means = [statistics.mean(len(t.question) for t in tasks(name, lv)) for lv in levels]
    answer_means = [statistics.mean(len(t.answer) for t in tasks(name, lv)) for lv in levels]
    assert question_means == sorted(question_means), question_means
    assert answer_means[-1] >= answer_means[0], answer_means
    # Clearly harder from the first to the last level, not just equal.
    assert question_means[-1] > 1.3 * question_means[0]


@pytest.mark.parametrize("name", list(FAMILIES))
def test_level_one_is_small(name):
    # A tiny model must be able to learn level 1: very short questions and answers.
    questions = {t.question for t in tasks(name, 1)}
    assert max(len(q) for q in questions) <= 15
    assert all(len(t.answer) <= 5 for t in tasks(name, 1))

