"""Rewards: correctness through each family's normalizer, format bonus, config validation."""

import math

import pytest

from swarm_node.rewards.answer import format_answer
from swarm_node.rewards.errors import InvalidRewardConfig, TaskError
from swarm_node.rewards.registry import make_task
from swarm_node.rewards.scoring import Reward, RewardConfig, score, score_batch
from swarm_node.rewards.task import Task, TaskId


def task(family, question, answer):
    return Task(TaskId(family, 0, 1), question, answer)


def test_reward_total():
    assert Reward(1.0, 0.1).total == pytest.approx(1.1)
    assert Reward(0.0, 0.0).total == 0.0


def test_correct_and_well_formed():
    t = make_task("arithmetic:3:2")
    reward = score(t, format_answer(t.answer))
    assert reward == Reward(correctness=1.0, format=0.1, well_formed=True) and reward.verified
    assert reward.total == pytest.approx(1.1)


def test_every_family_accepts_its_ground_truth():
    for family in ("arithmetic", "lists", "base", "boolean", "counting"):
        for level in range(1, 6):
            t = make_task(TaskId(family, 11, level))
            assert score(t, format_answer(t.answer)).correctness == 1.0


def test_wrong_answer_keeps_format_reward():
    t = task("arithmetic", "3+5=", "8")
    assert score(t, "<answer>9</answer>") == Reward(0.0, 0.1, True)


def test_correct_but_malformed_gets_no_format_reward():
    t = task("arithmetic", "3+5=", "8")
    assert score(t, "so <answer>8</answer> done") == Reward(1.0, 0.0)  # right, not verified
    assert score(t, "<answer>8</answer><answer>9</answer>") == Reward(1.0, 0.0)


def test_verified_does_not_depend_on_the_format_bonus():
    # With format_weight 0 no completion earns a format term, yet a right, well-formed answer is
    # still verified (the rows the success floor may lift) and a right one in other text is not.
    t, cfg = task("arithmetic", "3+5=", "8"), RewardConfig(format_weight=0.0)
    assert score(t, "<answer>8</answer>", cfg) == Reward(1.0, 0.0, True) and score(t, "<answer>8</answer>", cfg).verified
    assert not score(t, "so <answer>8</answer> done", cfg).verified
    assert not score(t, "<answer>9</answer>", cfg).verified


@pytest.mark.parametrize("completion", ["8", "", "<answer>8", "<answer></answer>", "\ud800"])
def test_nothing_extractable(completion):
    assert score(task("arithmetic", "3+5=", "8"), completion).correctness == 0.0


@pytest.mark.parametrize("word", ["t", "true", "TRUE", "1", " True "])
def test_boolean_normalization(word):
    assert score(task("boolean", "not f", "t"), format_answer(word)).correctness == 1.0
    assert score(task("boolean", "not t", "f"), format_answer(word)).correctness == 0.0


@pytest.mark.parametrize("given", ["1 2 3", "1  2  3", "1,2,3", "1, 2, 3", "[1, 2, 3]"])
def test_list_spacing_normalization(given):
    assert score(task("lists", "sort 3 1 2", "1 2 3"), format_answer(given)).correctness == 1.0


def test_base_leading_zeros_and_case():
    t = task("base", "255 to base 16", "ff")
    assert score(t, format_answer("FF")).correctness == 1.0
    assert score(t, format_answer("0ff")).correctness == 1.0


def test_custom_format_weight():
    t = task("arithmetic", "3+5=", "8")
    assert score(t, format_answer("8"), RewardConfig(format_weight=0.0)) == Reward(1.0, 0.0, True)
    assert score(t, format_answer("8"), RewardConfig(format_weight=0.5)).format == 0.5


@pytest.mark.parametrize("weight", [-0.1, math.nan, math.inf, "0.1", None, True])
def test_reward_config_validation(weight):
    with pytest.raises(InvalidRewardConfig) as info:
        RewardConfig(format_weight=weight)
    assert repr(weight) in str(info.value)


def test_score_batch():
    tasks = [task("arithmetic", "3+5=", "8"), task("boolean", "not f", "t")]
    rewards = score_batch(tasks, ["<answer>8</answer>", "x"], RewardConfig())
    assert rewards == [Reward(1.0, 0.1, True), Reward(0.0, 0.0)]
    assert score_batch([], []) == []


def test_score_batch_length_mismatch():
    with pytest.raises(TaskError, match="2 tasks and 1 completions"):
        score_batch([task("arithmetic", "3+5=", "8")] * 2, ["8"])


def test_lenient_reads_the_block_then_a_box_then_the_last_number_of_a_numeric_task():
    t = make_task("arithmetic:1:1")
    right, wrong = t.answer, str(int(t.answer) + 1)
    lenient = RewardConfig(answer="lenient")
    # The block wins over anything after it; its bonus is the block's alone.
    assert score(t, f"<answer>{right}</answer>", lenient) == Reward(1.0, 0.1, True)
    assert score(t, f"so <answer>{wrong}</answer> then {right}", lenient).correctness == 0.0
    # No block: a final \boxed{}, else the last number written.
    assert score(t, f"it is \\boxed{{{right}}}.", lenient) == Reward(1.0, 0.0)
    said = score(t, f"First {wrong}, so the answer is {right}.", lenient)
    assert said == Reward(1.0, 0.0) and said.answered and not said.verified  # never a peer-floor row
    assert score(t, f"The answer is {right}.").correctness == 0.0  # tags: no block, no answer
    assert not score(t, f"The answer is {right}.").answered
    assert not score(t, "no idea", lenient).answered


def test_lenient_reads_no_bare_number_where_the_answer_is_not_one():
    from swarm_node.rewards.answer import extract_lenient, is_number

    t = make_task("boolean:1:1")
    assert not is_number(t.answer)
    assert not score(t, "I think 1.", RewardConfig(answer="lenient")).answered
    assert extract_lenient("x 1,234.", numeric=True) == "1234"  # the full stop is not part of it
    assert extract_lenient("-3.5 and then 12", numeric=True) == "12"
    assert extract_lenient(r"\boxed{\frac{1}{2}} done", numeric=False) == r"\frac{1}{2}"
    assert extract_lenient(r"\boxed{unclosed", numeric=False) is None
    assert extract_lenient("5 " + "9" * 10000, numeric=True) == "9" * 4096  # the scan cap holds: the end
    assert extract_lenient("12 " + "x" * 10000, numeric=True) is None  # ... of the text, where answers are
    assert extract_lenient("the list is 1,2", numeric=True) == "2"  # a comma between digits is not 1,000s
    assert extract_lenient("so 1,234,567 in all", numeric=True) == "1234567"


def test_an_unknown_reading_is_refused():
    with pytest.raises(InvalidRewardConfig, match="answer must be one of"):
        RewardConfig(answer="loose")
