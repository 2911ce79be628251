"""scripts/soak.py end to end, shortened to 90 s on the tiny model: six nodes (a learner, two
workers, three full nodes) over hivemind with one kill and resume, a partition, a bootstrap
outage and one attack phase; the report holds every judged quantity, and the targets a run this
short can judge hold (each kill resumed from its verified checkpoint, every metrics file
continuous, no checkpoint failing verification, no traceback, no node exiting on its own)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from tests.helpers.paths import ROOT

pytestmark = [pytest.mark.slow, pytest.mark.subprocess, pytest.mark.daemon]

SMALL = ["generation.prompts_per_step=4", "generation.num_generations=4", "generation.max_completion_length=8",
         "swarm.external_groups=2", "learner.learning_rate=3e-3"]


def test_a_short_soak_judges_everything_and_loses_nothing(warm_tiny_model_dir, tmp_path):
    out = tmp_path / "out"
    cmd = [sys.executable, "scripts/soak.py", "--minutes", "1.5", "--model", str(warm_tiny_model_dir),
           "--attacks", "envelope", "--round-seconds", "1.5", "--checkpoint-every", "3", "--every", "5",
           "--runs", str(tmp_path / "run"), "--out", str(out), "--flags", *SMALL]
    log = tmp_path / "soak.log"
    with log.open("wb") as f:
        p = subprocess.Popen(cmd, cwd=ROOT, stdout=f, stderr=subprocess.STDOUT, env=dict(os.environ, OMP_NUM_THREADS="1"))
        assert p.wait(timeout=400) == 0, log.read_text()[-4000:]
    res = json.loads((out / "soak.json").read_text())
    assert (out / "soak.png").stat().st_size > 0
    md = (out / "soak.md").read_text()
    assert md.startswith("# Soak") and "python scripts/soak.py --minutes 1.5" in md and "| target |" in md
    j = res["judged"]
    assert set(j) == {"processes", "disk", "resumes", "delivery", "tracebacks", "worker_lag", "failed"}
    row = next(r for r in j["processes"] if r["judged"])
    for k in ("rss_growth", "rss_slope_mb_h", "p2pd_rss_growth", "fds_growth", "p2pd_fds_growth", "threads_growth"):
        assert k in row
    assert {"checkpoints_within", "chunks_within", "logs_mb_per_hour"} <= set(j["disk"])
    assert [p["name"] for p in j["delivery"]["phases"]] == ["clean", "envelope", "clean"]
    targets = {t["target"]: t["met"] for t in res["targets"]}
    assert len(targets) == 16  # with "one swarm to the end"
    # The kill: node5 60 s in, resumed from the checkpoint that verified when it was killed.
    [kill] = j["resumes"]["resumes"]
    assert kill["node"] == 5 and kill["ok"], kill
    assert all(c["continuous"] and c["records"] > 0 for c in j["resumes"]["continuity"].values()), j["resumes"]
    assert j["resumes"]["checkpoints_checked"] > 0 and j["resumes"]["checkpoints_failing"] == []
    assert j["tracebacks"] == {} and j["failed"] == {}
    assert j["disk"]["checkpoints_within"] and j["disk"]["chunks_within"], j["disk"]
    # node5 restarted while the bootstrap peer was away (50 s to the end): it rejoined through the
    # peers it cached (its own exit, or a failed join, would show in "failed" above).
    assert [e["what"] for e in res["events"]].count("bootstrap_stop") == 1
    assert res["found_via"].get("peer cache", 0) >= 1, res["found_via"]
