"""Answer format: building, extracting and checking <answer>X</answer> completions."""

import pytest

from swarm_node.rewards.answer import (
    ANSWER_CLOSE,
    ANSWER_OPEN,
    MAX_SCAN_CHARS,
    extract_answer,
    format_answer,
    is_well_formed,
)


def test_constants_and_format():
    assert (ANSWER_OPEN, ANSWER_CLOSE) == ("<answer>", "</answer>")
    assert format_answer("1 2 3") == "<answer>1 2 3</answer>"
    assert extract_answer(format_answer("42")) == "42"
    assert is_well_formed(format_answer("42"))


@pytest.mark.parametrize(
    ("completion", "expected"),
    [
        ("<answer>8</answer>", "8"),
        ("  \n<answer> 8 </answer>\n ", "8"),
        ("the answer is <answer>8</answer> i think", "8"),
        ("<answer>8</answer><answer>9</answer>", "8"),
        ("<answer>8", None),
        ("8</answer>", None),
        ("</answer><answer>8</answer>", "8"),
        ("<answer>a<answer>b</answer>", "b"),
        ("<answer></answer>", ""),
        ("<answer>   </answer>", ""),
        ("", None),
        ("   ", None),
        ("<ANSWER>8</ANSWER>", None),
        ("<answer>1\n2</answer>", "1\n2"),
        ("\x00\xff\ud800<answer>é✓</answer>", "é✓"),
        ("<answer><answer></answer></answer>", ""),
    ],
)
def test_extract_answer(completion, expected):
    assert extract_answer(completion) == expected


@pytest.mark.parametrize(
    ("completion", "expected"),
    [
        ("<answer>8</answer>", True),
        ("  \n<answer>8</answer>\n\t ", True),
        ("<answer> 1 2 3 </answer>", True),
        ("x<answer>8</answer>", False),
        ("<answer>8</answer>x", False),
        ("<answer>8</answer><answer>8</answer>", False),
        ("<answer>8</answer> <answer>8</answer>", False),
        ("<answer>8", False),
        ("<answer></answer>", False),
        ("<answer>  </answer>", False),
        ("<answer>a<answer>b</answer>", False),
        ("", False),
        ("8", False),
        ("\x00\ud800", False),
    ],
)
def test_is_well_formed(completion, expected):
    assert is_well_formed(completion) is expected


def test_huge_completion_is_capped():
    huge = "x" * 1_000_000
    assert extract_answer(huge) is None
    assert not is_well_formed(huge)
    # A block beyond the scan window is not looked at.
    assert extract_answer(huge + "<answer>8</answer>") is None
    assert extract_answer("<answer>8</answer>" + huge) == "8"
    assert not is_well_formed(format_answer("8") + " " * MAX_SCAN_CHARS)


def test_block_straddling_the_cap_is_ignored():
    prefix = "x" * (MAX_SCAN_CHARS - len("<answer>8</ans"))
    assert extract_answer(prefix + "<answer>8</answer>") is None


def test_many_tags_do_not_crash():
    garbage = "</answer>" * 50_000 + "<answer>" * 50_000
    assert extract_answer(garbage) is None
    assert not is_well_formed(garbage)
