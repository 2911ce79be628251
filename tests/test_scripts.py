"""The experiment and benchmark scripts stay runnable: each answers --help, the statistics the
experiment reports are built from give hand-computed numbers, and the /proc readers they share
(scripts/common/proc.py) parse sample text to hand-computed numbers."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from tests.helpers.paths import ROOT

from common import curves, proc  # scripts/ is on pytest's pythonpath
from common.report import markdown_table, write_bench_report, write_experiment_report

SCRIPTS = sorted(p.name for p in (ROOT / "scripts").glob("*.py") if p.stem.startswith(("exp_", "bench_", "soak")))


@pytest.mark.parametrize("script", SCRIPTS)
@pytest.mark.subprocess
def test_script_answers_help(script):
    r = subprocess.run([sys.executable, f"scripts/{script}", "--help"], cwd=ROOT, capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert "usage:" in r.stdout


def test_final_and_first_reach_use_the_rolling_window(monkeypatch):
    monkeypatch.setattr(curves, "WINDOW", 2)
    curve = [0.0, 0.0, 1.0, 1.0, 0.0]
    assert curves.final(curve) == pytest.approx(0.5)  # the mean of the last WINDOW steps
    # 2-step rolling means: -, 0, 0.5, 1, 0.5 → 0.5 first reached at step 3, 1.0 at step 4
    assert curves.first_reach(curve, 0.5) == 3
    assert curves.first_reach(curve, 1.0) == 4
    assert curves.first_reach(curve, 1.1) is None


def test_worst_dip_is_the_largest_fall_below_the_running_peak(monkeypatch):
    monkeypatch.setattr(curves, "WINDOW", 1)
    assert curves.worst_dip([0.1, 0.5, 0.2, 0.4, 0.1, 0.6]) == pytest.approx(0.4)
    assert curves.worst_dip([0.1, 0.2, 0.3]) == 0.0  # never falls


def test_rerunning_a_report_keeps_its_hand_written_reading(tmp_path, capsys):
    report = tmp_path / "exp.md"
    write_experiment_report(tmp_path, "exp", ["# old", "| 1 |"], {"x": 1}, "plot")
    report.write_text(report.read_text() + "\n## What this shows\n\n- a reading\n")
    write_experiment_report(tmp_path, "exp", ["# new", "| 2 |"], {"x": 2}, "plot")
    text = report.read_text()
    assert text.startswith("# new\n| 2 |\n\n![plot](exp.png)\n") and "| 1 |" not in text
    assert text.count("## What this shows") == 1 and text.endswith("- a reading\n")
    assert json.loads((tmp_path / "exp.json").read_text()) == {"x": 2}


def test_a_benchmark_report_notes_an_oversubscribed_cpu(tmp_path, capsys):
    result, md = {"x": 1}, ["# bench", "| 1 |"]
    write_bench_report(tmp_path, "b", result, md, {"a": [1.0, 2.0], "b": [4.0]})  # 4.0 / 1.0: over 3x
    assert result["max_over_min_time"] == 4.0
    text = (tmp_path / "b.md").read_text()
    assert text.startswith("# bench\n| 1 |\n\nNote: round times vary 4x") and text.endswith("avoids the stalls.\n")
    assert json.loads((tmp_path / "b.json").read_text()) == {"x": 1, "max_over_min_time": 4.0}
    write_bench_report(tmp_path, "c", {}, ["# calm"], {"a": [1.0, 3.0]})  # 3x: no note
    assert (tmp_path / "c.md").read_text() == "# calm\n"



def test_a_markdown_table_has_its_header_rule_and_rows():
    lines = markdown_table(["variant", "s/step", "note"], [["first", "1.5", ""], ["bf16", 0.75, "`x`"]], "lr")
    assert "\n".join(lines) == ("| variant | s/step | note |\n"
                                "|---|---:|---|\n"  # past align's end: left
                                "| first | 1.5 |  |\n"
                                "| bf16 | 0.75 | `x` |")
    assert markdown_table(["a"], []) == ["| a |", "|---|"]
    with pytest.raises(ValueError, match="2 cells under 3 headers"):
        markdown_table(["a", "b", "c"], [["1", "2"]])
    with pytest.raises(ValueError, match="align"):
        markdown_table(["a"], [], "c")

STATUS = """Name:\tpython3
State:\tS (sleeping)
PPid:\t1
VmPeak:\t  900000 kB
VmSize:\t  850000 kB
VmHWM:\t  204800 kB
VmRSS:\t  102400 kB
Threads:\t3
"""


def test_resident_memory_and_its_peak_are_read_in_bytes():
    assert proc.parse_memory(STATUS) == proc.Memory(rss=102400 * 1024, peak=204800 * 1024)
    # a zombie's status has no memory lines: nothing resident
    assert proc.parse_memory("Name:\tx\nState:\tZ (zombie)\nThreads:\t1\n") == proc.Memory(rss=0, peak=0)


def test_parent_and_cpu_ticks_are_counted_from_the_last_parenthesis():
    # the command name may hold spaces and parentheses; utime 250 + stime 50 ticks
    stat = "4242 (py (x) y) S 17 4242 4242 0 -1 4194304 100 0 0 0 250 50 3 1 20 0 3 0 12345 0 0\n"
    assert proc.parse_stat(stat) == proc.Stat(ppid=17, cpu_ticks=300)


def test_a_process_tree_is_its_root_and_every_descendant():
    procs = [proc.Process(1, 0, b"init\0"), proc.Process(10, 1, b"node\0"), proc.Process(11, 10, b"dht\0"),
             proc.Process(12, 11, b"p2pd\0"), proc.Process(20, 1, b"other\0")]
    assert sorted(proc.family(10, procs)) == [10, 11, 12]
    assert proc.family(12, procs) == [12]


def test_a_run_folders_node_processes_are_found_by_their_exact_run_dir():
    procs = [proc.Process(10, 1, b"python\0-m\0swarm_node.node.cli\0join\0--run.dir\0/r/node1\0"),
             proc.Process(11, 1, b"python\0-m\0swarm_node.node.cli\0join\0--run.dir\0/r/node10\0"),
             proc.Process(12, 1, b"python\0other.py\0--run.dir\0/r/node1\0")]
    assert proc.node_processes(procs, "/r/node1") == [10]


def test_machine_cpu_is_busy_over_total_between_two_readings():
    # user 100, nice 20, system 30, idle 400, iowait 50, irq 6, softirq 7, steal 8 (guest time not added)
    text = "cpu  100 20 30 400 50 6 7 8 0 0\ncpu0 50 10 15 200 25 3 3 4 0 0\n"
    assert proc.parse_machine_jiffies(text) == (171, 621)  # busy: total 621 less idle and iowait
    assert proc.busy_share((171, 621), (271, 821)) == 0.5
    assert proc.busy_share(None, (271, 821)) is None and proc.busy_share((171, 621), (171, 621)) is None


def test_a_process_that_is_not_there_reads_as_nothing():
    gone = 4_194_305  # above Linux's largest pid_max (2**22): no process has it
    assert proc.memory(gone) is None and proc.cpu_seconds(gone) == 0.0 and proc.threads(gone) == []
    assert proc.open_fds(gone) is None and proc.open_fds(os.getpid()) >= 3  # stdin, stdout, stderr at least
    me = proc.memory()  # and this one, read for real
    assert me is not None and 0 < me.rss <= me.peak
    assert os.getpid() in proc.threads(os.getpid()) and proc.machine_jiffies() is not None


@pytest.mark.parametrize("argv, says", [
    (["exp_baselines.py", "--groups", "3"], "every G must divide 32"),
    (["exp_sapo_splits.py", "--splits", "4/4"], "the 8/0 split is the baseline"),
    (["exp_sapo_splits.py", "--distinct-models"], "use --transport hivemind"),
    (["exp_payoff.py", "--arms", "count"], "the corrected arm is the primary comparison"),
])
@pytest.mark.subprocess
def test_experiments_refuse_settings_they_cannot_run(argv, says, tmp_path):
    r = subprocess.run([sys.executable, f"scripts/{argv[0]}", *argv[1:], "--runs", str(tmp_path / "runs"),
                        "--out", str(tmp_path / "out")], cwd=ROOT, capture_output=True, text=True)
    assert r.returncode == 2 and says in r.stderr
    assert not (tmp_path / "runs").exists() and not (tmp_path / "out").exists()  # refused before any work


@pytest.mark.subprocess
def test_gpu_check_runs_in_its_cpu_form(tmp_path):
    """scripts/gpu_check.py, the prepared GPU check, on the CPU (--quick): every learner option
    runs a real node in bf16 with LoRA and gradient checkpointing, and the out-of-memory run (the
    error injected here) halves the micro-batch and goes on."""
    out = tmp_path / "gpu_check.json"
    r = subprocess.run([sys.executable, "scripts/gpu_check.py", "--device", "cpu", "--quick", "--steps", "2",
                        "--out", str(out)], cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    report = json.loads(out.read_text())
    assert set(report["runs"]) == {"mean", "overlap", "april", "overlap_april", "median", "opob", "opob_approx", "m2po"}
    for name, run in report["runs"].items():
        assert run["steps"] == 2 and run["finite"] and run["tokens_per_s"] > 0, name
    assert report["runs"]["overlap"]["staleness_max"] == 1  # generated a step ahead: one version behind
    assert set(report["overlap"]) == {"overlap", "april", "overlap_april"}
    oom = report["oom_recovery"]
    assert oom["mode"] == "injected (CPU)" and oom["oom_halvings"] == 2 and oom["micro_batch"] == 4
    assert report["profile"]["estimated_peak_gib"] > 0 and report["profile"]["run_estimated_peak_gib"] > 0
    assert "LoRA rank 16" in report["profile"]["run_settings"]  # the estimate is of what the runs ran
    v = report["verdicts"]
    assert v["every_option_finite"] and v["oom_recovered"] and v["peak_within_estimate"] is None  # no CUDA peak here


@pytest.mark.subprocess
def test_bench_throughput_runs_every_arm_and_reports_ratios(tmp_path, warm_tiny_model_dir):
    """scripts/bench_throughput.py, tiny: the four arms are real runs from the same seed, and the
    report gives each arm's finished groups a second against the synchronous loop's."""
    r = subprocess.run([sys.executable, "scripts/bench_throughput.py", "--model", str(warm_tiny_model_dir),
                        "--steps", "4", "--rounds", "1", "--max-new-tokens", "12", "--out", str(tmp_path)],
                       cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    report = json.loads((tmp_path / "bench_throughput.json").read_text())
    med = report["median"]
    assert set(med) == {"sync", "overlap", "april", "overlap_april"} and med["sync"]["groups_per_s_vs_sync"] == 1
    assert med["sync"]["staleness_max"] == 0 and med["overlap"]["staleness_max"] == 1
    assert all(run[0]["finite"] and run[0]["steps"] == 4 for run in report["rounds"].values())
    assert (tmp_path / "bench_throughput.png").exists() and "| overlap_april |" in (tmp_path / "bench_throughput.md").read_text()


@pytest.mark.subprocess
@pytest.mark.daemon
def test_bench_broadcast_runs_its_trials_and_the_flood(tmp_path):
    """scripts/bench_broadcast.py, tiny (half a MB, two followers, hivemind): pipelined, source to
    all, and the flood of fresh identities, which orders its relays by the learner's rule."""
    r = subprocess.run([sys.executable, "scripts/bench_broadcast.py", "--size-mb", "0.5", "--followers", "2",
                        "--carriers", "hivemind", "--out", str(tmp_path)],
                       cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    rows = json.loads((tmp_path / "bench_broadcast.json").read_text())["rows"]
    assert all(row["followers_done"] == 2 and row["bad_chunks"] == 0 for row in rows), rows
    flood = [row for row in rows if "fresh identities" in row["mode"]]
    assert len(flood) == 1 and flood[0]["strangers_listed"] == 4, rows
