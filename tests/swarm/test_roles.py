"""A learner and three workers as separate `swarm-node join` processes over hivemind (slow; run in
CI): the workers follow the learner's weights through the pipelined broadcast, generate with them
and share; the learner trains on their rollouts with their version lag counted."""

from __future__ import annotations

import pytest

from procs import metrics, procs, status  # noqa: F401 - procs is a fixture
from protocol.identity import load_or_create_identity

pytestmark = pytest.mark.slow


def test_a_learner_and_three_workers(procs, warm_tiny_model_dir, tmp_path):
    _, maddr = procs.bootstrap()
    (tmp_path / "learner").mkdir()
    learner_id = load_or_create_identity(tmp_path / "learner" / "identity.pem").peer_id  # the node reuses it
    steps = 16
    common = ["--swarm.round_seconds", "2", "--broadcast.max_staleness", "2"]
    learner = procs.node("learner", maddr, warm_tiny_model_dir, "--role", "learner", "--train.steps", str(steps),
                         *common)
    workers = [procs.node(f"w{i}", maddr, warm_tiny_model_dir, "--role", "worker", "--follow", learner_id,
                          "--train.steps", str(steps), "--train.seed", str(i + 1), *common) for i in range(3)]
    for name, p in [("learner", learner)] + [(f"w{i}", w) for i, w in enumerate(workers)]:
        assert p.wait(timeout=400) == 0, (tmp_path / f"{name}.log").read_text()[-4000:]

    worker_ids = {status(tmp_path / f"w{i}")["swarm"]["peer_id"] for i in range(3)}
    recs = metrics(tmp_path / "learner")
    assert len(recs) == steps
    used = {p for r in recs for p in (r.get("external_by_peer") or {})}
    assert used and used <= worker_ids  # it trained on its workers' rollouts, nobody else's
    lagged = [r for r in recs if r.get("worker_groups")]
    assert len(lagged) >= steps // 2 and all(0 <= r["worker_lag_mean"] <= 2 for r in lagged)
    assert all(0 < r["rho"] <= 1 and 0 < r["lr_factor"] <= 1 for r in lagged)  # the correction saw worker data
    st = status(tmp_path / "learner")
    assert st["broadcast"]["role"] == "learner" and st["broadcast"]["published_version"] >= 5
    for i in range(3):
        w = status(tmp_path / f"w{i}")
        b = w["broadcast"]
        assert b["role"] == "worker" and b["following"] == learner_id
        assert b["applied_versions"] >= 5 and b["bad_chunks"] == {} and b["manifests_refused"] == {}
        wrecs = metrics(tmp_path / f"w{i}")
        assert all(r["policy_version"] == 0 for r in wrecs)  # a worker trains nothing itself
        assert all(r["version_lag"] is not None and r["version_lag"] <= 2 for r in wrecs)
        assert len({r["applied_version"] for r in wrecs}) >= 3  # it generated with newer versions over time
