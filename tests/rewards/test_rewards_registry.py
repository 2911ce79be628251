"""Registry: deterministic regeneration (in-process, across processes, golden values),
validation of ids and sampling requests."""

import json
import os
import random
import subprocess
import sys

import pytest

from swarm_node.rewards.errors import InvalidTaskId, TaskError, UnknownTaskFamily
from swarm_node.rewards.registry import FAMILIES, all_families, get_family, make_task, sample_task_ids
from swarm_node.rewards.task import MAX_SEED, Task, TaskId

from tests.helpers.paths import ROOT as REPO_ROOT
EXPECTED_FAMILIES = ["arithmetic", "lists", "base", "boolean", "counting"]

# Frozen outputs: nodes on different versions must agree on every task. A deliberate generator
# change breaks this test on purpose; update it together with a protocol/version bump.
GOLDEN = {
    "arithmetic:1001:1": ("9+2=", "11"),
    "arithmetic:1003:3": ("2*4-42=", "-34"),
    "arithmetic:1005:5": ("647*(444*242)=", "69518856"),
    "lists:1001:1": ("sort 4 3", "3 4"),
    "lists:1003:3": ("min 1 2 12 2 19", "1"),
    "lists:1005:5": ("sum 83 51 -7 60 27 -88", "126"),
    "base:1001:1": ("100 from base 2", "4"),
    "base:1003:3": ("75 from base 8", "61"),
    "base:1005:5": ("30317 to base 3", "1112120212"),
    "boolean:1001:1": ("not f", "t"),
    "boolean:1003:3": ("(f or t) or not f", "t"),
    "boolean:1005:5": ("((f and t) or (f or f)) and not f", "f"),
    "counting:1001:1": ("len abb", "3"),
    "counting:1003:3": ("len fcbbebcd", "8"),
    "counting:1005:5": ("rev gqdkjzsspkxvbini", "inibvxkpsszjkdqg"),
}


def all_ids(seeds=range(3)):
    return [
        TaskId(name, seed, level)
        for name, family in FAMILIES.items()
        for level in range(1, family.max_difficulty + 1)
        for seed in seeds
    ]


def test_all_families_in_canonical_order():
    assert all_families() == EXPECTED_FAMILIES
    assert list(FAMILIES) == EXPECTED_FAMILIES
    assert all(FAMILIES[name].name == name for name in FAMILIES)
    assert all(FAMILIES[name].max_difficulty == 5 for name in FAMILIES)


def test_golden_tasks():
    for text, (question, answer) in GOLDEN.items():
        task = make_task(text)
        assert (task.question, task.answer) == (question, answer), text


def test_make_task_accepts_str_and_id():
    task = make_task("arithmetic:5:1")
    assert isinstance(task, Task)
    assert task.id == TaskId("arithmetic", 5, 1)
    assert make_task(TaskId("arithmetic", 5, 1)) == task


def test_repeated_calls_are_identical():
    for task_id in all_ids(range(20)):
        assert make_task(task_id) == make_task(task_id)


@pytest.mark.subprocess
def test_same_tasks_in_fresh_subprocess():
    ids = [str(task_id) for task_id in all_ids(seeds=(0, 1, MAX_SEED))]
    code = (
        "import json, sys\n"
        "from swarm_node.rewards.registry import make_task\n"
        "ids = json.loads(sys.argv[1])\n"
        "print(json.dumps([[make_task(i).question, make_task(i).answer] for i in ids]))\n"
    )
    # A different hash seed proves nothing depends on hash().
    env = {**os.environ, "PYTHONHASHSEED": "12345"}
    result = subprocess.run(
        [sys.executable, "-c", code, json.dumps(ids)],
        cwd=REPO_ROOT,
        env=env,
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    )
    remote = json.loads(result.stdout)
    local = [[make_task(i).question, make_task(i).answer] for i in ids]
    assert remote == local


def test_different_seeds_vary():
    for name in EXPECTED_FAMILIES:
        for level in (1, 5):
            questions = {make_task(TaskId(name, seed, level)).question for seed in range(50)}
            assert len(questions) >= 5, (name, level)


def test_unknown_family_names_value_and_choices():
    with pytest.raises(UnknownTaskFamily) as info:
        make_task("algebra:1:1")
    message = str(info.value)
    assert "'algebra'" in message
    for name in EXPECTED_FAMILIES:
        assert name in message
    assert isinstance(info.value, TaskError)
    with pytest.raises(UnknownTaskFamily):
        get_family("nope")


@pytest.mark.parametrize("difficulty", [6, 100])
def test_difficulty_above_max(difficulty):
    with pytest.raises(InvalidTaskId) as info:
        make_task(TaskId("arithmetic", 1, difficulty))
    assert str(difficulty) in str(info.value)
    assert "1..5" in str(info.value)


def test_difficulty_zero():
    with pytest.raises(InvalidTaskId) as info:
        make_task("arithmetic:1:0")
    assert "0" in str(info.value)


@pytest.mark.parametrize("bad", ["arith", "arithmetic:x:1", "arithmetic:1:2:3", ""])
def test_malformed_id_strings(bad):
    with pytest.raises(InvalidTaskId) as info:
        make_task(bad)
    assert repr(bad) in str(info.value)


def test_make_task_rejects_other_types():
    with pytest.raises(TypeError):
        make_task(("arithmetic", 1, 1))  # type: ignore[arg-type]


def test_sample_task_ids_reproducible_and_in_range():
    ids = sample_task_ids(random.Random(3), 500)
    assert ids == sample_task_ids(random.Random(3), 500)
    assert {task_id.family for task_id in ids} == set(EXPECTED_FAMILIES)
    assert {task_id.difficulty for task_id in ids} == {1, 2}
    assert all(0 <= task_id.seed <= MAX_SEED for task_id in ids)
    assert len({task_id.seed for task_id in ids}) == 500
    for task_id in ids[:50]:
        make_task(task_id)


def test_sample_task_ids_respects_choices():
    ids = sample_task_ids(random.Random(0), 200, families=["boolean"], difficulties=[4, 5])
    assert {task_id.family for task_id in ids} == {"boolean"}
    assert {task_id.difficulty for task_id in ids} == {4, 5}
    assert sample_task_ids(random.Random(0), 0) == []


@pytest.mark.parametrize("n", [-1, 1.5, "3", None, True])
def test_sample_task_ids_bad_n(n):
    with pytest.raises(TaskError) as info:
        sample_task_ids(random.Random(0), n)
    assert repr(n) in str(info.value)


def test_sample_task_ids_bad_families():
    with pytest.raises(UnknownTaskFamily) as info:
        sample_task_ids(random.Random(0), 3, families=["arithmetic", "calculus"])
    assert "'calculus'" in str(info.value)
    with pytest.raises(TaskError, match="must not be empty"):
        sample_task_ids(random.Random(0), 3, families=[])
    with pytest.raises(TaskError, match="'lists'"):
        sample_task_ids(random.Random(0), 3, families="lists")  # type: ignore[arg-type]


@pytest.mark.parametrize("difficulties", [[0], [1, 6], [2.0], [True]])
def test_sample_task_ids_bad_difficulties(difficulties):
    with pytest.raises(InvalidTaskId) as info:
        sample_task_ids(random.Random(0), 3, difficulties=difficulties)
    assert "1..5" in str(info.value)


def test_sample_task_ids_empty_difficulties():
    with pytest.raises(TaskError, match="must not be empty"):
        sample_task_ids(random.Random(0), 3, difficulties=[])
