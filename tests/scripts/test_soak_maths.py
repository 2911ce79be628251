"""The soak's judging arithmetic (scripts/soak_suite/maths.py), its schedule and its verdicts, on
hand-computed numbers; no process started."""

from __future__ import annotations

import pytest

from soak_suite.judge import judge_lag, judge_processes
from soak_suite.maths import counter_increase, ends, growth, slope, step_gaps, undisturbed_rate
from soak_suite.sampler import disk_kind
from soak_suite.schedule import attack_sets, faults_of, kill_order, make_schedule


def test_the_slope_is_least_squares():
    assert slope([0, 1, 2], [1, 3, 5]) == pytest.approx(2.0)
    # (0,0) (1,1) (2,1) (3,2): mean t 1.5, mean y 1; sum dt*dy = 1.5 + 0 + 0 + 1.5 = 3; sum dt^2 = 5
    assert slope([0, 1, 2, 3], [0, 1, 1, 2]) == pytest.approx(0.6)
    assert slope([1], [1]) is None and slope([2, 2], [1, 5]) is None


def test_growth_compares_the_means_of_a_windows_first_and_last_samples():
    assert ends([100, 102, 104, 110, 110, 113]) == (102.0, 111.0)  # 3 each side
    assert growth([100, 102, 104, 110, 110, 113]) == pytest.approx(9 / 102)
    assert ends([10, 20]) == (10.0, 20.0)  # one each side: they never overlap
    assert growth([]) is None and growth([0, 5]) is None


def test_a_counter_that_restarts_with_its_process_counts_every_increase():
    # 0 → 5 → 9, restart, 3 → 4: 9 + 3 + 1; a missing reading changes nothing
    assert counter_increase([0, 5, None, 9, 3, 4]) == 13
    assert counter_increase([None, None]) == 0


def test_step_gaps_find_lost_and_twice_recorded_steps():
    assert step_gaps([1, 2, 3])["continuous"]
    g = step_gaps([1, 2, 4, 4, 5])
    assert (g["missing"], g["duplicated"], g["last"], g["continuous"]) == ([3], [4], 5, False)
    assert step_gaps([])["continuous"]


def test_a_rate_skips_intervals_outside_the_phase_or_touching_a_disturbance():
    pts = [(0, 0), (60, 10), (120, 30), (180, 40), (240, 70)]
    assert undisturbed_rate(pts, 0, 240, []) == (pytest.approx(70 / 4), 4.0)
    # (60, 120) touches the disturbance: 10 + 10 + 30 over 3 minutes
    assert undisturbed_rate(pts, 0, 240, [(70, 80)]) == (pytest.approx(50 / 3), 3.0)
    assert undisturbed_rate(pts, 60, 180, []) == (pytest.approx(15.0), 2.0)
    assert undisturbed_rate(pts, 100, 150, []) == (None, 0.0)


def test_a_node_folders_files_count_by_kind():
    from pathlib import Path

    kinds = [disk_kind(Path(p)) for p in ("checkpoints/step_000010/model.safetensors", "broadcast/chunks/ab",
                                          "node.log", "metrics.jsonl", "status.json")]
    assert kinds == ["checkpoints", "chunks", "logs", "metrics", "other"]


def test_the_hour_kills_every_five_minutes_each_node_and_a_full_node_in_the_outage():
    sets, skipped = attack_sets(["envelope", "flood", "no_such"], ("flood", "garbage"), ("garbage",))
    assert sets == [("envelope", ("garbage",)), ("flood", ("flood",))] and skipped == ["no_such"]
    s = make_schedule(60, 6, 2, sets)
    assert [t for _, t in s.kills] == [300.0 * k for k in range(1, 12)]
    assert {n for n, _ in s.kills} == set(range(6)) and s.warm_up == 600
    assert s.partition[:2] == (1080.0, 1200.0) and s.partition[2] == [[0, 1, 2], [3, 4, 5]]
    assert s.outage == pytest.approx((2025.0, 2325.0))  # a quarter of it before the kill at 2100 s
    in_outage = [n for n, t in s.kills if s.outage[0] <= t < s.outage[1]]
    assert in_outage == [4]  # a full node: its peer cache has peers
    assert {n for n, t in s.kills if t > 1800} == {4, 5}  # nodes 0-3 live from their kill to the end
    assert [p.name for p in s.phases] == ["clean", "envelope", "clean", "flood", "clean"]
    assert s.phases[0].start == 600 and s.phases[-1].end == 3600
    f = faults_of(s)
    assert [m["after_seconds"] for m in f["malicious"]] == [1200.0, 2400.0]
    from swarm_node.node.sim.faults import SimFaults

    SimFaults.model_validate(f).check(6, "hivemind")


def test_a_short_soak_kills_from_60_s_on_40_s_apart_at_least():
    s = make_schedule(1.5, 6, 2, [("envelope", ("garbage",))])  # the test's soak
    assert [t for _, t in s.kills] == [60.0] and s.warm_up == 15
    assert s.outage == (50.0, 90.0)  # 40 s at least, a quarter of it before the kill
    five = make_schedule(5, 6, 2, [])
    assert five.kills == [(5, 60.0), (4, 100.0), (2, 140.0), (3, 180.0), (1, 220.0), (0, 260.0)]
    assert five.outage == (170.0, 210.0)  # node3, a full node, is killed in it
    assert s.partition[1] - s.partition[0] == 10  # at least 10 s


def test_the_kill_in_the_outage_is_swapped_to_a_full_node():
    assert kill_order(6, 2, 4, None) == [5, 4, 3, 2]
    assert kill_order(6, 2, 4, 3) == [5, 4, 2, 3]  # slot 3 had node2, a worker: swapped with the next full one
    # every node once, then the last two full nodes in turn: nodes 0-3 live on to the end
    assert kill_order(6, 2, 11, None) == [5, 4, 3, 2, 1, 0, 4, 5, 4, 5, 4]
    assert kill_order(6, 2, 11, 6) == [5, 4, 3, 2, 1, 0, 4, 5, 4, 5, 4]  # slot 6 is a full node already


def test_each_process_is_judged_after_its_own_warm_up():
    def sample(t, pid, rss):
        return {"t": t, "procs": {"node0": {"pid": pid, "rss": rss * 1e6, "fds": 10, "threads": 5, "p2pd_rss": 0,
                                            "p2pd_fds": 0}}, "nodes": {}}
    samples = [sample(t, 1, 100 + t / 10) for t in range(0, 200, 10)] + [sample(t, 2, 50) for t in range(200, 300, 10)]
    rows = {r["pid"]: r for r in judge_processes(samples, t0=0, warm_up=100)}
    # pid 1: judged from t=100 (rss 110..119): start mean(110,111,112), end mean(117,118,119)
    assert rows[1]["judged"] and rows[1]["rss_start_mb"] == 111.0 and rows[1]["rss_end_mb"] == 118.0
    assert rows[1]["rss_slope_mb_h"] == pytest.approx(360.0)  # 0.1 MB a second
    assert not rows[2]["judged"] and rows[2]["samples"] == 0  # started at 200: its warm-up outlasts the run


def test_worker_lag_is_behind_the_learners_published_version_a_restart_given_time_to_catch_up():
    def sample(t, published, applied):
        return {"t": t, "procs": {}, "nodes": {"node0": {"role": "learner", "published_version": published},
                                               "node1": {"role": "worker", "applied_version": applied,
                                                         "max_staleness": 2, "lag": 0}}}
    out = judge_lag([sample(0, 9, 0), sample(10, 10, 9), sample(20, 11, None), sample(30, 14, 11)], 0, 5, [])
    # its own "lag" says 0 throughout; against the learner: 1, then 3 (the sample before the warm-up is left out)
    assert out == {"node1": {"samples": 2, "within": 1, "max": 3, "max_staleness": 2, "catch_ups_s": []}}
    # restarted at 32: behind (5, 4) until 60, within S again: 28 s of catch-up, not counted
    later = [sample(40, 20, 15), sample(50, 21, 17), sample(60, 22, 20), sample(70, 23, 22)]
    out = judge_lag([sample(10, 10, 9), *later], 0, 5, [{"what": "restart", "node": 1, "at": 32.0}])
    assert out["node1"] == {"samples": 3, "within": 3, "max": 2, "max_staleness": 2, "catch_ups_s": [28.0]}
    # the learner restarted at 32 and the worker is still 5 behind 70 s later: past the catch-up it counts
    stuck = [sample(40, 20, 15), sample(110, 20, 15)]
    out = judge_lag(stuck, 0, 5, [{"what": "restart", "node": 0, "at": 32.0}])
    assert out["node1"] == {"samples": 1, "within": 0, "max": 5, "max_staleness": 2, "catch_ups_s": [78.0]}
    # and a catch-up the run's end cuts short is reported as such
    out = judge_lag([sample(40, 20, 15), sample(50, 21, 15)], 0, 5, [{"what": "restart", "node": 0, "at": 32.0}])
    assert out["node1"]["samples"] == 0 and out["node1"]["behind_at_end_s"] == 18.0


def test_memory_is_judged_by_its_largest_growth_not_its_largest_change():
    """A process whose memory shrank 15% does not hide one that grew 13% (the hour's first report
    read the -14.6% as the worst and called the target met)."""
    from soak_suite.verdict import _worst

    rows = [{"name": "node3", "pid": 1, "judged": True, "rss_growth": -0.146, "fds_growth": -0.2},
            {"name": "node3", "pid": 2, "judged": True, "rss_growth": 0.133, "fds_growth": 0.1},
            {"name": "node4", "pid": 3, "judged": False, "rss_growth": 0.5, "fds_growth": 0.5}]
    assert _worst(rows, "rss_growth", signed=True) == (0.133, "node3 pid 2")
    assert _worst(rows, "fds_growth") == (-0.2, "node3 pid 1")  # flat either way: the largest change


def test_a_folder_removed_while_it_is_counted_is_skipped(tmp_path, monkeypatch):
    """A checkpoint folder pruned while the sampler walks the run folder (a kill, a rename) must
    not end the sampling: the CI's short soak once ran 25 minutes past its end after Path.rglob
    raised FileNotFoundError on a vanished folder, leaving nobody to stop the sim."""
    import os

    from soak_suite.sampler import folder_bytes

    (tmp_path / "checkpoints" / "step_3").mkdir(parents=True)
    (tmp_path / "checkpoints" / "step_3" / "model.safetensors").write_bytes(b"x" * 10)
    (tmp_path / "metrics.jsonl").write_text("{}\n")
    real_scandir = os.scandir

    def vanishing(path):
        if str(path).endswith("step_3"):
            raise FileNotFoundError(path)  # pruned between the parent's listing and its own
        return real_scandir(path)

    monkeypatch.setattr(os, "scandir", vanishing)
    out = folder_bytes(tmp_path)
    assert out["metrics"] == 3 and out["checkpoints"] == 0


def test_one_swarm_compares_the_last_clean_phase_with_the_first():
    from soak_suite.verdict import one_swarm

    def phases(*rates):
        return [{"name": "clean" if a is None else a, "attacks": [] if a is None else [a], "rate": r}
                for a, r in rates]
    # The soak's hour before the fix: 161 groups / node / min at first, 93 once two restarted
    # nodes had joined a second swarm through the restarted bootstrap.
    split = one_swarm(phases((None, 161.2), ("flood", 159.9), (None, 144.2), ("unknown_family", 121.0), (None, 93.4)))
    assert split["met"] is False and "(58%)" in split["measured"]
    assert one_swarm(phases((None, 100.0), ("flood", 50.0), (None, 91.0)))["met"] is True  # attack phases aside
    assert one_swarm(phases((None, 100.0), ("flood", 99.0)))["met"] is None  # one clean phase: nothing to compare
