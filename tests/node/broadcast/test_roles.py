"""A learner and three workers as separate `swarm-node join` processes over hivemind (slow; run in
CI): the workers follow the learner's weights through the pipelined broadcast, generate with them
and share; the learner trains on their rollouts with their version lag counted."""

from __future__ import annotations

import signal
import time

import pytest

from tests.helpers.procs import hostile_refusals, metrics, procs, status  # noqa: F401 - procs is a fixture
from tests.helpers.wait import wait_until
from swarm_node.protocol.identity import load_or_create_identity

pytestmark = [pytest.mark.slow, pytest.mark.subprocess]


def test_a_learner_and_three_workers(procs, warm_tiny_model_dir, tmp_path):
    """The learner also generates ahead (--train.max_async 1: its next rollouts made while it learns,
    one version behind): it publishes the versions it trained, not the copy it generates with."""
    _, maddr = procs.bootstrap()
    (tmp_path / "learner").mkdir()
    learner_id = load_or_create_identity(tmp_path / "learner" / "identity.pem").peer_id  # the node reuses it
    steps = 16
    common = ["--swarm.round_seconds", "2", "--broadcast.max_staleness", "2"]
    learner = procs.node("learner", maddr, warm_tiny_model_dir, "--role", "learner", "--train.steps", str(steps),
                         "--train.max_async", "1", *common)
    workers = [procs.node(f"w{i}", maddr, warm_tiny_model_dir, "--role", "worker", "--follow", learner_id,
                          "--train.steps", str(steps), "--train.seed", str(i + 1), *common) for i in range(3)]
    for name, p in [("learner", learner)] + [(f"w{i}", w) for i, w in enumerate(workers)]:
        assert p.wait(timeout=400) == 0, (tmp_path / f"{name}.log").read_text()[-4000:]

    worker_ids = {status(tmp_path / f"w{i}")["swarm"]["peer_id"] for i in range(3)}
    recs = metrics(tmp_path / "learner")
    assert len(recs) == steps and all(r["staleness"] <= 1 for r in recs)
    assert sum(r["staleness"] == 1 for r in recs) >= steps // 2  # it did generate ahead
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
        assert b["applied_versions"] >= 5 and b["bad_chunks"] == {} and hostile_refusals(b["manifests_refused"], st["broadcast"]["published_version"]) == {}
        wrecs = metrics(tmp_path / f"w{i}")
        assert all(r["policy_version"] == 0 for r in wrecs)  # a worker trains nothing itself
        assert all(r["version_lag"] is not None and r["version_lag"] <= 2 for r in wrecs)
        assert len({r["applied_version"] for r in wrecs}) >= 3  # it generated with newer versions over time
        assert b["applied_version"] <= recs[-1]["policy_version"] + st["broadcast"].get("version_offset", 0)


def test_a_learner_killed_and_resumed_behind_its_last_version_never_signs_a_number_twice(
        procs, warm_tiny_model_dir, tmp_path):
    """The learner is killed (SIGKILL) after publishing past its last checkpoint and resumed from
    that checkpoint: it continues past the last number it signed (a worker would refuse the new
    weights as old, or label rollouts of the old ones with numbers that now mean others), and its
    worker applies the new versions and is trained on again."""
    _, maddr = procs.bootstrap()
    (tmp_path / "learner").mkdir()
    learner_id = load_or_create_identity(tmp_path / "learner" / "identity.pem").peer_id
    common = ["--swarm.round_seconds", "2", "--broadcast.max_staleness", "2"]
    lflags = ["--role", "learner", "--train.steps", "20", "--run.checkpoint_every", "5", *common]
    learner = procs.node("learner", maddr, warm_tiny_model_dir, *lflags)
    worker = procs.node("w0", maddr, warm_tiny_model_dir, "--role", "worker", "--follow", learner_id,
                        "--train.steps", "1000", *common)
    ldir, wdir = tmp_path / "learner", tmp_path / "w0"

    def published() -> int:
        try:
            return status(ldir)["broadcast"]["published_version"] or 0
        except (KeyError, ValueError, OSError):
            return 0

    wait_until(lambda: published() >= 8, 300, "the learner to publish version 8", learner)  # checkpoint: 5
    learner.send_signal(signal.SIGKILL)
    learner.wait(timeout=10)
    killed_at, last_signed = time.time(), published()
    wait_until(lambda: (status(wdir).get("broadcast") or {}).get("applied_version", -1) >= last_signed - 1, 60,
               "the worker to hold the learner's last versions", worker)
    restarted = procs.node("learner", maddr, warm_tiny_model_dir, *lflags, "--resume")
    assert restarted.wait(timeout=400) == 0, (tmp_path / "learner.log").read_text()[-4000:]
    st = status(ldir)["broadcast"]
    assert st["version_offset"] >= 1 and st["published_version"] > last_signed
    after = [r for r in metrics(ldir) if r["time"] > killed_at]
    assert after[0]["step"] <= 6  # it resumed from the checkpoint, behind what it had published
    assert sum(r.get("worker_groups") or 0 for r in after) > 0  # its worker's rollouts of new versions
    w = status(wdir)["broadcast"]
    assert w["applied_version"] > last_signed and w["manifests_refused"] == {} and w["bad_chunks"] == {}
    worker.send_signal(signal.SIGTERM)
    assert worker.wait(timeout=60) == 130  # stopped before its steps were done, cleanly


def test_a_worker_behind_a_learner_that_has_exited_stops_naming_it(procs, warm_tiny_model_dir, tmp_path):
    """The learner ran and exited; a worker that follows it holds no version of it (it is behind
    by more than max_staleness), hears no new version, heartbeat or chunk, and after
    --broadcast.learner_timeout stops with exit 1 and one line naming the learner, no traceback."""
    _, maddr = procs.bootstrap()
    (tmp_path / "learner").mkdir()
    learner_id = load_or_create_identity(tmp_path / "learner" / "identity.pem").peer_id
    common = ["--swarm.round_seconds", "2", "--broadcast.max_staleness", "2"]
    learner = procs.node("learner", maddr, warm_tiny_model_dir, "--role", "learner", "--train.steps", "3", *common)
    assert learner.wait(timeout=300) == 0, (tmp_path / "learner.log").read_text()[-4000:]
    t0 = time.monotonic()
    worker = procs.node("w0", maddr, warm_tiny_model_dir, "--role", "worker", "--follow", learner_id,
                        "--train.steps", "1000", "--broadcast.learner_timeout", "8", *common)
    assert worker.wait(timeout=240) == 1, (tmp_path / "w0.log").read_text()[-4000:]
    took = time.monotonic() - t0
    out = (tmp_path / "w0.log").read_text()
    assert f"swarm-node: error: the learner {learner_id} (--follow) gave no sign for" in out, out[-4000:]
    assert "It has stopped or left the swarm" in out and "Traceback" not in out
    st = status(tmp_path / "w0")
    assert st["phase"] == "stopped" and learner_id in st["phase_detail"], st
    assert took < 200, took  # the join, the model, then the 8 s: not a wait for ever
