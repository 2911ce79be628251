"""The split study's statistics (scripts/exp_sapo_splits.py, and the held-out curves of
scripts/common/curves.py it reads) on hand-made numbers: the reach on sparse evaluations, each
seed's and split's numbers, the runs' folders and flags, and the report's held-out table."""

from __future__ import annotations

from argparse import Namespace

import pytest

import exp_sapo_splits as study
from common import curves
from common.curves import first_reach_at, held_out_curve, mean_at_steps


def args(**kw) -> Namespace:
    """The script's defaults, then ``kw``."""
    base = dict(splits=["8/0", "4/4"], seeds=[0, 1], nodes=4, steps=60, round_seconds=1.2, transport="memory",
                distinct_models=False, metric="correctness", eval_every=20, eval_tasks=64, select="fresh",
                replace_uninformative=False, tasks=None, levels=None, learning_rate=None)
    return Namespace(**(base | kw))


def test_a_held_out_curve_is_each_evaluations_greedy_score_sampled_where_none():
    evals = [{"step": 0, "greedy": 0.25, "sampled": 0.1}, {"step": 20, "greedy": None, "sampled": 0.5},
             {"step": 40, "greedy": None, "sampled": None}, {"step": 60, "greedy": 0.0, "sampled": 0.3}]
    assert held_out_curve(evals) == [(0, 0.25), (20, 0.5), (60, 0.0)]  # 0.0 is a score, not a missing one


def test_the_reach_is_the_first_evaluated_step_at_the_target_without_a_rolling_mean():
    curve = [(0, 0.2), (20, 0.35), (40, 0.3), (60, 0.4)]
    assert first_reach_at(curve, 0.35) == 20  # one evaluation at the bar is enough; the dip after it is kept
    assert first_reach_at(curve, 0.36) == 60
    assert first_reach_at(curve, 0.2) == 0  # there before training
    assert first_reach_at(curve, 0.41) is None


def test_mean_at_steps_averages_where_every_curve_evaluated():
    m = mean_at_steps([[(0, 0.1), (20, 0.3), (40, 0.5)], [(0, 0.3), (20, 0.5)]])
    assert [s for s, _ in m] == [0, 20] and [v for _, v in m] == pytest.approx([0.2, 0.4])


# Two 8/0 nodes end at 0.5 and 0.25: the bar is 0.375. Over a 60-step run, evaluated every 20 steps
# (scores that binary floating point holds exactly, so "at the bar" is exact).
BASE = [[(0, 0.25), (20, 0.375), (40, 0.4), (60, 0.5)], [(0, 0.25), (20, 0.25), (40, 0.3), (60, 0.25)]]
SHARING = [[(0, 0.25), (20, 0.375), (40, 0.5), (60, 0.75)], [(0, 0.25), (20, 0.375), (40, 0.3), (60, 0.5)]]


def test_a_seeds_held_out_numbers_reach_the_8_0_nodes_mean_last_score():
    base = study.held_out_numbers(BASE, BASE, 60)
    # node0 reaches 0.375 at step 20 (1/3 of the run), node1 never (the whole run): (1/3 + 1) / 2
    assert base == pytest.approx({"held_bar": 0.375, "held_start": 0.25, "held_final": 0.375,
                                  "held_reach_frac": 2 / 3, "held_reached": 1})
    sharing = study.held_out_numbers(SHARING, BASE, 60)
    # both at step 20 (node1 dips below the bar after it: a reach is the first time); last (0.75 + 0.5) / 2
    assert sharing == pytest.approx({"held_bar": 0.375, "held_start": 0.25, "held_final": 0.625,
                                     "held_reach_frac": 1 / 3, "held_reached": 2})
    there = study.held_out_numbers([[(0, 0.375), (60, 0.375)]], BASE, 60)  # at the bar before training: step 0
    assert there["held_reach_frac"] == 0.0 and there["held_reached"] == 1


def test_a_seeds_training_numbers_use_the_rolling_window(monkeypatch):
    monkeypatch.setattr(curves, "WINDOW", 2)
    base = [[0.0, 0.2, 0.2, 0.4], [0.0, 0.0, 0.2, 0.2]]  # finals (last 2 steps) 0.3 and 0.2: the bar 0.25
    nodes = [[0.0, 0.4, 0.4, 0.4], [0.0, 0.0, 0.0, 0.2]]  # 2-step means: -, 0.2, 0.4, 0.4 / -, 0, 0, 0.1
    got = study.train_numbers(nodes, base, 4)
    assert got == pytest.approx({"cumulative": 0.7, "final": 0.25, "reach_frac": (3 / 4 + 1) / 2, "reached": 1})


def test_a_split_is_the_mean_over_seeds_with_the_spread_of_its_levels():
    seeds = [{"cumulative": 10.0, "final": 0.2, "reach_frac": 0.5, "reached": 3, "held_final": 0.3},
             {"cumulative": 14.0, "final": 0.4, "reach_frac": 1.0, "reached": 1, "held_final": 0.5}]
    got = study.summarise(seeds)
    assert got["per_seed"] is seeds
    assert {k: v for k, v in got.items() if k != "per_seed"} == pytest.approx(
        {"cumulative": 12.0, "final": 0.3, "reach_frac": 0.75, "held_final": 0.4,
         "cumulative_sd": 2.0, "final_sd": 0.1, "held_final_sd": 0.1})  # pstdev of two: half their gap
    assert study.steps_vs({"r": 0.3}, {"r": 0.6}, "r") == 0.5
    assert study.steps_vs({"r": 0.3}, {"r": 0.0}, "r") is None  # 8/0 there before training


def test_runs_keep_the_first_studys_names_and_the_new_settings_name_theirs():
    assert study.run_name(args(), "4/4", 1) == "4-4-s1"
    held = args(metric="held-out", select="informative", replace_uninformative=True, tasks=["counting"],
                levels=[2], learning_rate=1e-4)
    assert study.run_name(held, "8/0", 0) == "8-0-s0-eval20x64-informative-replace-counting-L2-lr0.0001"


def test_an_arm_is_a_split_with_an_optional_learner_variant(monkeypatch, tmp_path):
    assert study.parse_split("4/4") == (4, 4, None) and study.parse_split("2/6+floor") == (2, 6, "floor")
    for bad in ("4/5", "4-4", "4/4+ess", "x/8"):
        with pytest.raises(ValueError):
            study.parse_split(bad)
    assert study.run_name(args(), "4/4+naive", 2) == "4-4+naive-s2"  # its own folder beside 4/4's
    seen = {}
    monkeypatch.setattr(study, "run_cli", lambda cmd, run_dir, *a: seen.setdefault("cmd", cmd))
    study.run_one(args(runs=tmp_path, rerun=False), "4/4+naive", 0, None)
    cmd = seen["cmd"]
    assert cmd[cmd.index("--swarm.external_groups") + 1] == "4"
    assert cmd[-4:] == ["--learner.off_policy_correction", "false", "--learner.lr_rule", "none"]


def test_every_arm_gets_the_selection_tasks_and_evaluation_flags():
    assert study.study_flags(args()) == ["--swarm.select", "fresh", "--swarm.replace_uninformative", "false"]
    flags = study.study_flags(args(metric="held-out", select="weakest", replace_uninformative=True, nodes=2,
                                   tasks=["counting"], levels=[2], learning_rate=1e-4, eval_every=25))
    assert flags == ["--swarm.select", "weakest", "--swarm.replace_uninformative", "true",
                     "--swarm.max_sender_share", "1", "--tasks.families", '["counting"]', "--tasks.difficulties", "[2]",
                     "--learner.learning_rate", "0.0001", "--eval.every", "25", "--eval.tasks_per_family", "64",
                     "--eval.at_start", "true"]


def test_the_held_out_report_names_its_selection_and_gives_the_reach_against_8_0():
    a = args(metric="held-out", select="informative", replace_uninformative=True, tasks=["counting"], levels=[2],
             nodes=2, seeds=[0])
    seeds = {s: [study.train_numbers([[0.1] * 60], [[0.1] * 60], 60) | study.held_out_numbers(c, BASE, 60)]
             for s, c in (("8/0", BASE), ("4/4", SHARING))}
    result = {"splits": {s: study.summarise(p) for s, p in seeds.items()}, "eval_tasks": 50}
    md = study.report(a, result)
    assert md[0] == ("# SAPO split study: 2 nodes, embedded default model, level-2 counting tasks, "
                     "selection: swarm.select informative, swarm.replace_uninformative true")
    rows = {line.split(" | ")[0]: line.split(" | ") for line in md if line.startswith(("| 8/0", "| 4/4"))}
    # held-out final, vs 8/0, reach fraction, got there, steps vs 8/0, own generation (x 4/8)
    assert rows["| 8/0"][5:11] == ["0.375 ± 0.000", "1.00x", "0.67", "1/2", "1.00x", "1.00x |"]
    assert rows["| 4/4"][5:11] == ["0.625 ± 0.000", "1.67x", "0.33", "2/2", "0.50x", "0.25x |"]  # (1/3) / (2/3), x 4/8
    assert "no rolling mean" in " ".join(md).lower()
    assert study.report(args(nodes=2), result)[0] == "# SAPO split study: 2 nodes, embedded default model, level-1 tasks"


def test_a_sparse_plot_draws_the_mean_at_each_evaluation(tmp_path):
    path = tmp_path / "p.png"
    curves.plot_mean_curves({"8/0": BASE, "4/4": SHARING}, path, "held-out", "t", sparse=True)
    assert path.stat().st_size > 0
