"""The skill-spread study's statistics (scripts/skill_spread/analysis.py) on hand-made evaluations."""

from __future__ import annotations

import pytest

from common.curves import first_reach_at, mean_at_steps
from skill_spread.analysis import (bars, family_curve, held_family, mean_reach, node_rows,
                                   reaches, speedup)


def ev(step: int, counting: float, boolean: float) -> dict:
    return {"step": step, "greedy": (counting + boolean) / 2,
            "families": {"counting": {"greedy": counting, "sampled": 0.0, "n": 32},
                         "boolean": {"greedy": boolean, "sampled": 0.0, "n": 32}}}


# Node 0 holds counting, node 1 boolean. Alone, each learns the other family slowly; sharing, sooner.
ALONE = [[ev(0, 0.6, 0.0), ev(20, 0.7, 0.1), ev(40, 0.8, 0.2), ev(60, 0.8, 0.3)],
         [ev(0, 0.0, 0.5), ev(20, 0.0, 0.6), ev(40, 0.1, 0.6), ev(60, 0.2, 0.6)]]
SHARING = [[ev(0, 0.6, 0.0), ev(20, 0.7, 0.3), ev(40, 0.8, 0.4), ev(60, 0.2, 0.5)],
           [ev(0, 0.0, 0.5), ev(20, 0.3, 0.6), ev(40, 0.5, 0.6), ev(60, 0.6, 0.6)]]


def test_node_k_holds_family_k_mod_2_and_its_curve_reads_each_evaluation():
    assert [held_family(k) for k in range(4)] == ["counting", "boolean", "counting", "boolean"]
    assert family_curve(ALONE[1], "counting") == [(0, 0.0), (20, 0.0), (40, 0.1), (60, 0.2)]
    sampled_only = {"step": 5, "families": {"counting": {"greedy": None, "sampled": 0.25, "n": 4}}}
    assert family_curve([sampled_only, {"step": 6, "families": {}}], "counting") == [(5, 0.25)]


def test_the_bar_is_half_the_holders_last_score_alone_and_reach_is_the_first_step_at_it():
    assert bars(ALONE) == pytest.approx({"counting": 0.4, "boolean": 0.3})  # 0.8 / 2, 0.6 / 2
    four = [*ALONE, [ev(0, 0.5, 0.0), ev(60, 0.6, 0.1)], [ev(0, 0.0, 0.3), ev(60, 0.1, 0.4)]]  # two holders each
    assert bars(four) == pytest.approx({"counting": 0.35, "boolean": 0.25})  # (0.8 + 0.6) / 4, (0.6 + 0.4) / 4
    curve = [(0, 0.0), (20, 0.3), (40, 0.5)]
    assert first_reach_at(curve, 0.3) == 20 and first_reach_at(curve, 0.31) == 40 and first_reach_at(curve, 0.6) is None


def test_rows_give_each_nodes_reach_finals_and_collapse():
    bar = bars(ALONE)
    alone, sharing = node_rows(ALONE, bar), node_rows(SHARING, bar)
    # alone: node0 reaches boolean 0.3 at step 60, node1 never reaches counting 0.4
    assert reaches(alone) == [60, None]
    # sharing: node0 reaches boolean 0.3 at step 20, node1 counting 0.4 at step 40
    assert reaches(sharing) == [20, 40]
    assert sharing[1]["lacks"]["counting"] == {"start": 0.0, "final": 0.6, "reach": 40, "there_at_start": False}
    lucky = node_rows([ALONE[0], [ev(0, 0.5, 0.5), ev(60, 0.6, 0.6)]], bar)  # node1 starts above counting's 0.4
    assert lucky[1]["lacks"]["counting"]["there_at_start"] and reaches(lucky) == [60]  # left out of the reaches
    assert (sharing[0]["own_start"], sharing[0]["own_final"]) == (0.6, 0.2)
    assert [r["collapsed"] for r in sharing] == [True, False]  # 0.2 < 0.6 / 2; 0.6 is not below 0.5 / 2
    assert not any(r["collapsed"] for r in alone)


def test_speedup_divides_the_mean_reach_alone_by_sharing_a_miss_counted_as_the_whole_run():
    assert mean_reach([60, None], 60) == 60  # (60 + 60) / 2
    assert speedup([60, None], [20, 40], 60) == pytest.approx(2.0)  # 60 / 30
    assert speedup([60, None], [None, None], 60) == pytest.approx(1.0)
    assert speedup([20], [0], 60) is None  # there before training: nothing to divide by


def test_mean_curve_averages_at_the_steps_every_curve_has():
    m = mean_at_steps([[(0, 0.0), (20, 0.4), (40, 0.6)], [(0, 0.2), (20, 0.2)]])
    assert [s for s, _ in m] == [0, 20] and [v for _, v in m] == pytest.approx([0.1, 0.3])
