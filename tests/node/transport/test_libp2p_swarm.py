"""A libp2p swarm for real: `swarm-node bootstrap --transport libp2p` and `swarm-node join
--transport libp2p` processes on loopback, no daemon (slow; run in CI). This module imports no
py-libp2p itself: the processes do."""

from __future__ import annotations

import pytest

from tests.helpers.procs import hostile_refusals, metrics, procs, status  # noqa: F401 - procs is a fixture
from tests.helpers.wait import wait_until
from swarm_node.protocol.identity import load_or_create_identity

pytestmark = [pytest.mark.slow, pytest.mark.subprocess]


def test_a_learner_a_full_node_and_a_worker_over_libp2p(procs, warm_tiny_model_dir, tmp_path):
    """n0 a learner, n1 a full node, n2 a worker following n0: the two training nodes train on
    each other's rollouts (and the worker's), and the worker applies the learner's weight versions
    fetched over libp2p streams."""
    ids = [load_or_create_identity(tmp_path / f"n{i}" / "identity.pem") for i in range(3)]
    _, maddr = procs.bootstrap(transport="libp2p")
    assert "/p2p/12D3KooW" in maddr
    roles = [["--role", "learner"], [], ["--role", "worker", "--follow", ids[0].peer_id]]
    steps = 12
    nodes = [procs.libp2p_node(f"n{i}", maddr, warm_tiny_model_dir, "--train.steps", str(steps),
                               "--train.seed", str(i), "--swarm.round_seconds", "2",
                               "--broadcast.max_staleness", "2", *roles[i])
             for i in range(3)]
    for i, p in enumerate(nodes):
        assert p.wait(timeout=400) == 0, (tmp_path / f"n{i}.log").read_text()[-3000:]
    peer_ids = {i.peer_id for i in ids}
    for i in range(2):
        st = status(tmp_path / f"n{i}")
        assert st["swarm"]["transport"] == "libp2p" and st["swarm"]["peer_id"] == ids[i].peer_id
        used = st["swarm"]["groups_used_by_peer"]
        assert set(used) == peer_ids - {ids[i].peer_id}, used  # both peers', never its own
        assert st["swarm"]["rejected_total"] == 0
        recs = metrics(tmp_path / f"n{i}")
        # Every group taken was trained on, but a worker's the learner dropped as stale (taken, then
        # refused by its version bound: roles.py admit_groups; a cumulative count in the record).
        dropped = max((r.get("worker_dropped_stale") or 0) for r in recs)
        assert len(recs) == steps and sum(r["external_groups"] for r in recs) + dropped == sum(used.values())
    learner, worker = status(tmp_path / "n0")["broadcast"], status(tmp_path / "n2")["broadcast"]
    assert learner["role"] == "learner" and learner["published_version"] >= 4
    assert worker["following"] == ids[0].peer_id and worker["applied_versions"] >= 2
    assert worker["bad_chunks"] == {} and hostile_refusals(worker["manifests_refused"], learner["published_version"]) == {}
    assert len({r["applied_version"] for r in metrics(tmp_path / "n2")}) >= 2
    log = (tmp_path / "n0.log").read_text()
    assert "libp2p host 12D3KooW" in log and "p2pd" not in log  # no daemon was started
