"""The payoff study's own arithmetic (scripts/exp_payoff.py) on hand-made curves: a run's flags per
arm, the nodes' mean curve, the end score, and the table's intervals; the comparisons themselves
are node/observe/paired.py's (tested there)."""

from __future__ import annotations

from argparse import Namespace

import pytest

import exp_payoff as study
from swarm_node.node.observe.paired import Point


def args(**kw) -> Namespace:
    base = dict(nodes=4, controls=2, steps=200, learning_rate=1e-4, eval_every=25, eval_tasks=256, eval_samples=4,
                round_seconds=1.5, transport="memory", runs=None)
    return Namespace(**(base | kw))


def test_every_run_carries_its_solo_nodes_and_each_arm_adds_its_own_flags():
    corrected = study.run_flags(args(), "sparse", "corrected", 3)
    count = study.run_flags(args(), "sparse", "count", 3)
    assert corrected[corrected.index("--control") + 1] == "2" and count[count.index("--control") + 1] == "2"
    assert count[-2:] == ["--learner.lr_rule", "count"]
    assert corrected == count[:-2]  # everything else alike: the same seed, regime, split, controls and evaluation
    assert corrected[corrected.index("--train.seed") + 1] == "300"
    assert corrected[corrected.index("--tasks.difficulties") + 1] == "[3]"
    assert corrected[corrected.index("--swarm.external_groups") + 1] == "4"
    sapo = study.run_flags(args(), "dense", "sapo", 0)
    assert sapo[-6:] == ["--learner.off_policy_correction", "false", "--learner.lr_rule", "none",
                         "--learner.scale_rewards", "group"]


def test_a_runs_folder_names_its_transport_and_a_digest_of_its_flags(tmp_path):
    a = args(runs=tmp_path)
    flags = study.run_flags(a, "dense", "corrected", 0)
    here = study.run_dir(a, flags, "dense", "corrected", 0)
    assert here.name.startswith("dense-corrected-s0-memory-")
    assert study.run_dir(a, flags, "dense", "corrected", 0) == here  # the same flags, the same folder
    other = study.run_flags(args(runs=tmp_path, learning_rate=2e-4), "dense", "corrected", 0)
    assert study.run_dir(a, other, "dense", "corrected", 0) != here  # another setting is another run
    hm = args(runs=tmp_path, transport="hivemind")
    assert study.run_dir(hm, study.run_flags(hm, "dense", "corrected", 0), "dense", "corrected", 0) != here


def test_a_stopped_failed_or_short_run_is_refused(tmp_path):
    import json

    def summary(**kw):
        body = {"partial": False, "failed": {}, "nodes": [{"node": "node0", "steps": 200}, {"node": "node1", "steps": 200}]}
        (tmp_path / "summary.json").write_text(json.dumps(body | kw))

    summary()
    assert study.finished(tmp_path, 200) == tmp_path
    for bad in ({"partial": True}, {"failed": {"node1": 1}},
                {"nodes": [{"node": "node0", "steps": 200}, {"node": "node1", "steps": 150}]}):
        summary(**bad)
        with pytest.raises(SystemExit, match="not a whole run"):
            study.finished(tmp_path, 200)


def test_holm_multiplies_the_kth_smallest_p_by_the_hypotheses_left_and_keeps_the_order():
    # m = 3, ascending: b 0.01 x 3 = 0.03; c 0.03 x 2 = 0.06; a 0.04 x 1 = 0.04, never below the one before: 0.06
    assert study.holm({"a": 0.04, "b": 0.01, "c": 0.03}) == pytest.approx({"b": 0.03, "c": 0.06, "a": 0.06})
    assert study.holm({"a": 0.6, "b": 0.7}) == {"a": 1.0, "b": 1.0}  # capped at 1


def test_the_detectable_difference_follows_the_seeds_spread():
    # n = 5, s = stdev(0.1, 0.0, -0.1, 0.2, -0.2) = 0.1581; (t_.975,4 2.776 + t_.8,4 0.941) x s / sqrt 5 = 0.2628
    assert study.detectable([0.1, 0.0, -0.1, 0.2, -0.2]) == pytest.approx(0.2628, abs=1e-3)
    assert study.detectable([0.1]) is None
    assert study.t_pvalue([0.1, 0.1]) is None  # no spread: no test
    assert study.t_pvalue([0.1, 0.2, 0.3]) == pytest.approx(0.0742, abs=1e-3)  # t = 0.2 / (0.1 / sqrt 3) = 3.46, 2 df


def test_the_mean_curve_is_taken_at_the_steps_every_node_evaluated():
    a = [Point(0, 0, 0.0, 0.2), Point(10, 40, 12.0, 0.4), Point(20, 80, 30.0, 0.6)]
    b = [Point(0, 0, 0.0, 0.4), Point(20, 80, 20.0, 0.2)]  # missed step 10 (a stop, a kill)
    got = study.mean_curve([a, b])
    assert [(p.step, p.own_groups, p.seconds) for p in got] == [(0, 0, 0.0), (20, 80, 25.0)]
    assert [p.score for p in got] == pytest.approx([0.3, 0.4])
    assert study.mean_curve([a, []]) == []  # a node that never evaluated: no curve for the seed
    assert study.mean_curve([]) == []


def test_the_end_score_is_the_mean_of_the_last_three_evaluations_after_the_start():
    c = [Point(0, 0, 0, 0.9), Point(10, 40, 1, 0.1), Point(20, 80, 2, 0.2), Point(30, 120, 3, 0.3), Point(40, 160, 4, 0.7)]
    assert study.end_score(c) == (0.2 + 0.3 + 0.7) / 3
    assert study.end_score(c[:2]) == 0.1  # one evaluation after the start: itself
    assert study.end_score(c[:1]) is None  # the start is no end score


def test_an_interval_prints_its_mean_and_bounds_or_says_it_had_one_seed():
    assert study.interval_text({"diff": 0.0312, "low": -0.0104, "high": 0.07, "n": 5, "level": 0.95}) == \
        "+0.031 [-0.010, +0.070]"
    assert study.interval_text({"diff": -0.05, "low": None, "high": None, "n": 1, "level": 0.95}) == "-0.050 (1 seed)"
    assert study.interval_text(None) == "-"


def test_a_comparison_is_one_interval_per_axis_as_plain_dicts():
    solo = [[Point(0, 0, 0, 0.2), Point(10, 40, 10, 0.3)], [Point(0, 0, 0, 0.2), Point(10, 40, 10, 0.2)]]
    swarm = [[Point(0, 0, 0, 0.2), Point(10, 40, 10, 0.5)], [Point(0, 0, 0, 0.2), Point(10, 40, 10, 0.3)]]
    got = study.comparison(swarm, solo)
    assert set(got) == {"step", "own_groups", "seconds"}
    assert abs(got["step"]["diff"] - 0.15) < 1e-12 and got["step"]["n"] == 2  # (0.2 + 0.1) / 2
    assert got["step"]["low"] <= 0.15 <= got["step"]["high"]


def test_agreement_is_the_mean_over_node_pairs_of_their_last_evaluations_alike_answers(tmp_path):
    import json

    def node(i: int, answers: list[str]) -> None:
        d = tmp_path / f"node{i}"
        d.mkdir()
        recs = [{"step": 10, "eval": {"greedy": 0.1, "greedy_answers": "ffff" * 4}},  # an earlier evaluation: not read
                {"step": 20, "eval": {"greedy": 0.2, "greedy_answers": "".join(answers)}}]
        (d / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in recs))

    node(0, ["aaaa", "bbbb", "cccc", "dddd"])
    node(1, ["aaaa", "bbbb", "0000", "0000"])  # half alike with node0
    node(2, ["aaaa", "0000", "0000", "0000"])  # a quarter alike with node0, three quarters with node1
    assert study.end_agreement(tmp_path, range(3)) == pytest.approx((0.5 + 0.25 + 0.75) / 3)
    assert study.end_agreement(tmp_path, range(1)) is None  # one node: no pair
