"""Shared canonicalization helpers."""

import pytest

from swarm_node.rewards.families.normalize import canonical_int, canonical_token, canonical_word


@pytest.mark.parametrize(
    ("text", "expected"),
    [("7", "7"), (" +007 ", "7"), ("-0", "0"), ("-12", "-12"), ("1_000", None), ("1.0", None),
     ("", None), ("\u0663", None), ("1" * 65, None), ("1" * 5000, None), ("--1", None)],
)
def test_canonical_int(text, expected):
    assert canonical_int(text) == expected


def test_canonical_word_and_token():
    assert canonical_word("  Hello \n World ") == "hello world"
    assert canonical_token(" 0042 ") == "42"
    assert canonical_token(" ABC ") == "abc"
