"""Hedging completions against the lenient answer reading (``tasks.answer: lenient``).

A node scores every peer's completion itself, but a hostile peer (signed, well-formed messages)
chooses the text: it may write several answers and hope the scorer picks the right one. The
reading (rewards/answer.py) is a fixed rule that never looks at the ground truth: the first
complete ``<answer>`` block in the first ``MAX_SCAN_CHARS``, else the last ``\\boxed{}`` in the
last ``MAX_SCAN_CHARS``, else (numeric answers) the last number there. So a completion is worth
credit for at most one answer, the one that rule reads; these tests hold each hedge to that, and
hold ``verified`` (the peer-floor rows) to one well-formed block.
"""

import pytest

from swarm_node.rewards.answer import MAX_SCAN_CHARS, extract_lenient
from swarm_node.rewards.registry import make_task
from swarm_node.rewards.scoring import Reward, RewardConfig, score
from swarm_node.rewards.task import Task, TaskId

LENIENT = RewardConfig(answer="lenient")
TAGS = RewardConfig(answer="tags")
ADD = make_task("arithmetic:17:1")  # 8+4= -> 12: a numeric family
BIG = make_task("arithmetic:5:5")  # 711+625+612= -> 1948: written 1,948 with a thousands comma
NEG = make_task("arithmetic:2:2")  # 29-95= -> -66
BOOL = make_task("boolean:1:2")  # f or not t -> f: not a number, so no last-number reading
SORT = make_task("lists:2:2")  # sort 4 7 8 -> 4 7 8: a list, not one number


def test_the_tasks_are_the_ones_the_tests_mean():
    # Seeds are the registry's: if a family's generator changes, these say so before the hedges do.
    assert (ADD.answer, BIG.answer, NEG.answer) == ("12", "1948", "-66")
    assert (BOOL.answer, SORT.answer) == ("f", "4 7 8")


def credited(task, completion, cfg=LENIENT) -> bool:
    return score(task, completion, cfg).correctness == 1.0


def _boxed(x) -> str:
    return f"\\boxed{{{x}}}"


def test_the_first_answer_block_is_read_never_a_later_one():
    right, wrong = ADD.answer, "13"
    assert credited(ADD, f"<answer>{right}</answer><answer>{wrong}</answer>")
    assert not credited(ADD, f"<answer>{wrong}</answer><answer>{right}</answer>")
    assert not credited(ADD, f"<answer>{wrong}</answer>" + "".join(f"<answer>{n}</answer>" for n in range(100)))
    # An open tag with no close is no block: the block is the last open before the first close.
    assert credited(ADD, f"<answer>{wrong} <answer>{right}</answer>")
    # The block wins over any box or number after it, right or wrong.
    assert not credited(ADD, f"<answer>{wrong}</answer> {_boxed(right)} {right}")
    assert not credited(BOOL, f"<answer>t</answer> {_boxed(BOOL.answer)}")
    # An empty block is a read answer (empty), not a pass to the box after it.
    assert not credited(ADD, f"<answer></answer> {_boxed(right)}")


def test_the_last_box_is_read_never_an_earlier_one():
    right = ADD.answer
    boxes = " ".join(_boxed(n) for n in range(100))  # 12 among them, 99 last
    assert not credited(ADD, boxes)
    assert not credited(ADD, f"{_boxed(right)} or maybe {_boxed(13)}")
    assert credited(ADD, f"{_boxed(13)} no: {_boxed(right)}")
    # A box wins over a later bare number, and an unclosed last box reads no box at all.
    assert not credited(ADD, f"{_boxed(13)} then {right}")
    assert not credited(ADD, f"{_boxed(right)} \\boxed{{13")  # the last number, 13, is read
    assert not credited(BOOL, f"{_boxed('f')} {_boxed('t')}")
    assert not credited(SORT, f"{_boxed(SORT.answer)} {_boxed('8 7 4')}")


def test_one_box_holding_several_answers_is_not_one_of_them():
    for junk in ("12 or 13", "13 or 12", "12, 13", "12/13", "12 13", "12?", "about 12", "12 (or 13)"):
        assert not credited(ADD, _boxed(junk)), junk
        assert not credited(ADD, f"<answer>{junk}</answer>"), junk
    assert not credited(ADD, _boxed(" ".join(map(str, range(1000)))))
    for junk in ("t or f", "f/t", "t f", "f, t"):
        assert not credited(BOOL, _boxed(junk)), junk
    assert not credited(SORT, _boxed("4 7 8 or 8 7 4"))
    assert not credited(SORT, _boxed("4 7 8 8 7 4"))


def test_every_number_then_a_wrong_one_reads_the_wrong_one():
    every = " ".join(map(str, range(1000)))
    assert len(every) < MAX_SCAN_CHARS  # the whole list is inside the window: nothing is cut off
    assert not credited(ADD, f"{every} 13")
    assert not credited(BIG, f"{every} 1,000 1,948 1949")
    assert not credited(NEG, " ".join(map(str, range(-1000, 1000))) + " 5")
    assert credited(ADD, f"{every} 12")  # the one answer read, the last, is right
    # Without spaces the commas glue "99,100,101,..." into one long number: none of them.
    assert not credited(ADD, ",".join(map(str, range(1000))))
    assert not credited(ADD, ",".join(map(str, range(14))))  # "...,12,13": two-digit items stay apart
    assert credited(ADD, ",".join(map(str, range(13))))  # "...,11,12": the last, 12, is the one read
    # A non-numeric answer reads no bare number at all: t/f written as 1/0 earn nothing bare.
    assert not score(BOOL, "t f 1 0 f", LENIENT).answered


def test_a_right_answer_before_the_window_is_not_read():
    # Box and number are read in the last MAX_SCAN_CHARS only: what the padding pushes out is gone.
    pad = " " * MAX_SCAN_CHARS
    for early in (ADD.answer, _boxed(ADD.answer), f"the answer is {ADD.answer}."):
        assert not score(ADD, early + pad, LENIENT).answered
        assert not credited(ADD, early + pad + "13")
        assert not credited(ADD, early + "x" * MAX_SCAN_CHARS + _boxed(13))
    assert not credited(BOOL, _boxed(BOOL.answer) + pad)
    # The block is read in the first MAX_SCAN_CHARS: one past them is not a block, and a number
    # read there is the window's last (so a wrong number after it decides).
    late = "." * MAX_SCAN_CHARS + f"<answer>{ADD.answer}</answer>"
    assert not credited(ADD, late, TAGS)
    assert not credited(ADD, late + " 13")
    assert not credited(BOOL, "." * MAX_SCAN_CHARS + f"<answer>{BOOL.answer}</answer>")


def test_thousands_commas_join_only_groups_of_three():
    assert extract_lenient("1,2", numeric=True) == "2"
    assert not credited(ADD, "1,2")  # a list "1, 2" is not 12
    assert not credited(ADD, "x 1,2.")
    assert credited(BIG, "it is 1,948.")  # the one reading of 1,948 is 1948
    assert not credited(BIG, "19,48")  # not a thousands group
    assert not credited(BIG, "1,9,4,8")
    assert not credited(BIG, "1,9484")  # reads 1,948 then 4: the last number is 4
    assert not credited(make_task(TaskId("arithmetic", 0, 5)), "84,358,1")  # 84358, then the 1 decides
    assert not credited(ADD, "1,012")  # "12" after a comma is not read alone: this is 1012
    assert not credited(ADD, "12.0") and not credited(ADD, "1.2e1")  # one number, not this integer
    # The block reads its content whole; commas there are the family's to judge.
    assert not credited(ADD, "<answer>1,2</answer>")


@pytest.mark.parametrize(
    "digits",
    [
        "\uff11\uff12",  # full-width 12
        "\u0661\u0662",  # Arabic-Indic 12
        "\u0967\u0968",  # Devanagari 12
        "\U0001d7cf\U0001d7d0",  # mathematical bold 12
        "1\uff12",  # half ASCII, half full-width
    ],
)
def test_non_ascii_digits_are_never_the_integer(digits):
    # Python's \d and int() take any Unicode digit; the normalizer takes ASCII digits only
    # (rewards/families/normalize.py), so none of these is 12 wherever it is written.
    assert int(digits) == 12  # what a normalizer calling int() alone would have credited
    for completion in (digits, f"it is {digits}", _boxed(digits), f"<answer>{digits}</answer>"):
        assert not credited(ADD, completion), completion
    # A Unicode digit read last shadows an ASCII right answer before it: still one reading.
    assert not credited(ADD, f"12 {digits}")


def test_only_the_answer_is_credited_by_design():
    # Brevity is not a hedge: a bare "12" commits to one answer. Lenient reading exists so that a
    # model answering in its own words scores (rewards/answer.py), and a bare number is such an
    # answer: earning the reward by writing nothing else is allowed by design. It earns no format
    # bonus and is never verified: those are the block's alone.
    assert score(ADD, ADD.answer, LENIENT) == Reward(1.0, 0.0, False)
    assert score(NEG, NEG.answer, LENIENT).correctness == 1.0
    assert score(ADD, _boxed(ADD.answer), LENIENT) == Reward(1.0, 0.0, False)
    assert not score(ADD, ADD.answer, TAGS).answered
    # A bare word is no number: a non-numeric answer needs a box or the block.
    assert not score(BOOL, BOOL.answer, LENIENT).answered
    assert credited(BOOL, _boxed(BOOL.answer)) and credited(SORT, _boxed(SORT.answer))


HEDGES = [
    " ".join(map(str, range(1000))),
    " ".join(_boxed(n) for n in range(-50, 50)),
    "".join(f"<answer>{n}</answer>" for n in range(50)),
    "<answer>3</answer>" + "".join(_boxed(n) for n in range(50)) + " ".join(map(str, range(50))),
    "".join(_boxed(n) for n in range(50)) + " " + " ".join(map(str, range(50))),
    _boxed("1 or 2 or 3") + " 4 5 6",
    "1,2,3,4,5,6,7,8,9,10,11,12,13",
    "-1 -2 -3 -4 1,000 2,000",
    str(list(range(100))),
    "0 " * MAX_SCAN_CHARS + "1 2 3",
    _boxed(7) + " " * MAX_SCAN_CHARS + " ".join(map(str, range(20))),
]


@pytest.mark.parametrize("completion", HEDGES, ids=range(len(HEDGES)))
def test_a_completion_is_credited_for_at_most_one_answer(completion):
    # The rule never looks at the truth, so over every possible integer answer a completion is
    # right for one at most (and its reward never depends on which it is, past that one).
    truths = [str(n) for n in range(-1000, 1001)]
    right = [t for t in truths if credited(Task(TaskId("arithmetic", 0, 1), "x=", t), completion)]
    assert len(right) <= 1, right
    assert sum(credited(Task(TaskId("boolean", 0, 1), "t", t), completion) for t in "tf") <= 1


def test_no_hedge_is_verified():
    right = ADD.answer
    hedges = [
        f"<answer>{right}</answer><answer>13</answer>",
        f"<answer>{right}</answer> <answer>{right}</answer>",  # the same answer twice: not one block
        f"<answer>13 <answer>{right}</answer>",
        f"<answer>{right}</answer> {_boxed(13)}",
        f"<answer>{right}</answer> or 13",
        f"<answer>{right}</answer>" + " " * MAX_SCAN_CHARS,  # past the scan cap is never well-formed
        f"<answer>{right} or 13</answer>",
        _boxed(right),
        right,
    ]
    for completion in hedges:
        for cfg in (LENIENT, TAGS):
            reward = score(ADD, completion, cfg)
            assert not reward.verified, completion
            # The bonus is the well-formed block's: only the one-block hedge (wrong) gets it.
            assert reward.format == (0.1 if completion == f"<answer>{right} or 13</answer>" else 0.0)
    assert score(ADD, f"<answer>{right}</answer>", LENIENT).verified  # the one way to be verified
