"""The experiment and benchmark scripts stay runnable: each answers --help, and the statistics the
experiment reports are built from give hand-computed numbers."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from tests.helpers.paths import ROOT

import exp_common  # noqa: E402

SCRIPTS = sorted(p.name for p in (ROOT / "scripts").glob("*.py") if p.stem.startswith(("exp_", "bench_"))
                 and p.stem not in ("exp_common", "bench_common"))


@pytest.mark.parametrize("script", SCRIPTS)
@pytest.mark.subprocess
def test_script_answers_help(script):
    r = subprocess.run([sys.executable, f"scripts/{script}", "--help"], cwd=ROOT, capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert "usage:" in r.stdout


def test_final_and_first_reach_use_the_rolling_window(monkeypatch):
    monkeypatch.setattr(exp_common, "WINDOW", 2)
    curve = [0.0, 0.0, 1.0, 1.0, 0.0]
    assert exp_common.final(curve) == pytest.approx(0.5)  # the mean of the last WINDOW steps
    # 2-step rolling means: -, 0, 0.5, 1, 0.5 → 0.5 first reached at step 3, 1.0 at step 4
    assert exp_common.first_reach(curve, 0.5) == 3
    assert exp_common.first_reach(curve, 1.0) == 4
    assert exp_common.first_reach(curve, 1.1) is None


def test_worst_dip_is_the_largest_fall_below_the_running_peak(monkeypatch):
    monkeypatch.setattr(exp_common, "WINDOW", 1)
    assert exp_common.worst_dip([0.1, 0.5, 0.2, 0.4, 0.1, 0.6]) == pytest.approx(0.4)
    assert exp_common.worst_dip([0.1, 0.2, 0.3]) == 0.0  # never falls


def test_rerunning_a_report_keeps_its_hand_written_reading(tmp_path, capsys):
    report = tmp_path / "exp.md"
    exp_common.write_report(tmp_path, "exp", ["# old", "| 1 |"], {"x": 1}, "plot")
    report.write_text(report.read_text() + "\n## What this shows\n\n- a reading\n")
    exp_common.write_report(tmp_path, "exp", ["# new", "| 2 |"], {"x": 2}, "plot")
    text = report.read_text()
    assert text.startswith("# new\n| 2 |\n\n![plot](exp.png)\n") and "| 1 |" not in text
    assert text.count("## What this shows") == 1 and text.endswith("- a reading\n")
    assert json.loads((tmp_path / "exp.json").read_text()) == {"x": 2}


@pytest.mark.parametrize("argv, says", [
    (["exp_baselines.py", "--groups", "3"], "every G must divide 32"),
    (["exp_sapo_splits.py", "--splits", "4/4"], "the 8/0 split is the baseline"),
    (["exp_sapo_splits.py", "--distinct-models"], "use --transport hivemind"),
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
    assert set(report["runs"]) == {"mean", "median", "opob", "opob_approx", "m2po"}
    for name, run in report["runs"].items():
        assert run["steps"] == 2 and run["finite"] and run["tokens_per_s"] > 0, name
    oom = report["oom_recovery"]
    assert oom["mode"] == "injected (CPU)" and oom["oom_halvings"] == 2 and oom["micro_batch"] == 4
    assert report["profile"]["estimated_peak_gib"] > 0 and report["profile"]["run_estimated_peak_gib"] > 0
    assert "LoRA rank 16" in report["profile"]["run_settings"]  # the estimate is of what the runs ran
    v = report["verdicts"]
    assert v["every_option_finite"] and v["oom_recovered"] and v["peak_within_estimate"] is None  # no CUDA peak here
