"""CLI flag handling: a misspelt or abbreviated flag is an error naming the key, never a silent
match of a longer flag (argparse's prefix matching is off)."""

from __future__ import annotations

import pytest

from node.cli import main


@pytest.mark.parametrize("argv, needle", [
    (["train", "--learner.learning_rat", "1e-4"], "learner.learning_rat: unknown key"),
    (["train", "--learner.learning_rat=1e-4"], "learner.learning_rat: unknown key"),
    (["train", "--nosuch.key", "1"], "nosuch"),
    (["train", "--bogus"], "unrecognized argument '--bogus'"),
    (["train", "--learner.baseline", "avg"], "learner.baseline"),
])
def test_bad_flags_fail_naming_the_key(argv, needle, capsys):
    assert main(argv) == 2
    assert needle in capsys.readouterr().err


def test_flag_with_equals_and_print_config(capsys):
    assert main(["train", "--learner.learning_rate=1e-3", "--tasks.difficulties", "[1, 3]", "--print-config"]) == 0
    out = capsys.readouterr().out
    assert '"learning_rate": 0.001' in out and '"difficulties": [\n      1,\n      3\n    ]' in out


def test_string_settings_take_numeric_looking_values_verbatim(capsys):
    assert main(["train", "--run.dir", "2024", "--model.name", "123", "--print-config"]) == 0
    out = capsys.readouterr().out
    assert '"dir": "2024"' in out and '"name": "123"' in out


def test_resume_shorthand_sets_run_resume(capsys):
    assert main(["train", "--resume", "--print-config"]) == 0
    assert '"resume": true' in capsys.readouterr().out


@pytest.mark.parametrize("flag, value", [("learner.delta", "0"), ("learner.epsilon_high", "-0.1"),
                                         ("learner.m2po_tau", "-1")])
def test_trust_region_bounds_are_checked_at_start(flag, value, capsys):
    assert main(["train", f"--{flag}", value]) == 2
    err = capsys.readouterr().err
    assert flag in err and err.count("+ flags") == 1
