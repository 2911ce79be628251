"""A private cluster for real: `swarm-node join --transport mqtt` processes and a Mosquitto broker
with logins, an ACL and TLS (slow; run in CI)."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from tests.helpers.mqtt_fixtures import broker_for, certs  # noqa: F401 - fixtures

from tests.helpers.procs import hostile_refusals, metrics, procs, status  # noqa: E402,F401 - procs is a fixture
from tests.helpers.wait import wait_until
from swarm_node.protocol.identity import load_or_create_identity  # noqa: E402

pytestmark = [pytest.mark.slow, pytest.mark.broker, pytest.mark.subprocess]


def _accounts(tmp_path: Path, n: int) -> list:
    """Each node's key made in advance, so its peer id can be its broker account (the ACL's %u)."""
    return [load_or_create_identity(tmp_path / f"n{i}" / "identity.pem") for i in range(n)]


def _login_flags(tmp_path: Path, i: int) -> list[str]:
    pw = tmp_path / f"n{i}.password"
    pw.write_text(f"pw-{i}\n")
    return ["--swarm.broker_password_file", str(pw)]


def test_a_learner_two_full_nodes_and_a_worker_over_tls_with_logins(procs, warm_tiny_model_dir, tmp_path, certs):
    """n0 a learner, n1 and n2 full nodes, n3 a worker following n0: every node that trains trains
    on its peers' rollouts, and the learner's weight versions reach the worker through the broker."""
    ids = _accounts(tmp_path, 4)
    roles = [["--role", "learner"], [], [], ["--role", "worker", "--follow", ids[0].peer_id]]
    with broker_for(tmp_path / "broker", ids, certs, anonymous=False) as m:
        steps = 10
        nodes = [procs.mqtt_node(f"n{i}", m.url("tls", ids[i].peer_id), warm_tiny_model_dir,
                                 *_login_flags(tmp_path, i), "--swarm.broker_ca_file", str(certs.ca),
                                 "--train.steps", str(steps), "--train.seed", str(i), "--swarm.round_seconds", "2",
                                 "--broadcast.max_staleness", "2", *roles[i])
                 for i in range(4)]
        for i, p in enumerate(nodes):
            assert p.wait(timeout=300) == 0, (tmp_path / f"n{i}.log").read_text()[-3000:]
    peer_ids = {i.peer_id for i in ids}
    for i in range(3):
        st = status(tmp_path / f"n{i}")
        assert st["swarm"]["transport"] == "mqtt" and st["swarm"]["peer_id"] == ids[i].peer_id
        used = st["swarm"]["groups_used_by_peer"]
        assert set(used) <= peer_ids - {ids[i].peer_id} and len(used) >= 2, used  # peers', never its own
        assert st["swarm"]["rejected_total"] == 0
        recs = metrics(tmp_path / f"n{i}")
        # Taken from peers = trained on + (the learner) its workers' groups past its staleness bound.
        dropped = recs[-1].get("worker_dropped_stale") or 0
        assert len(recs) == steps and sum(r["external_groups"] for r in recs) + dropped == sum(used.values())
    assert ids[3].peer_id in status(tmp_path / "n1")["swarm"]["groups_used_by_peer"]  # the worker's too
    learner, worker = status(tmp_path / "n0")["broadcast"], status(tmp_path / "n3")["broadcast"]
    assert learner["role"] == "learner" and learner["published_version"] >= 4
    assert worker["following"] == ids[0].peer_id and worker["applied_versions"] >= 3
    assert worker["bad_chunks"] == {} and hostile_refusals(worker["manifests_refused"], learner["published_version"]) == {}
    assert len({r["applied_version"] for r in metrics(tmp_path / "n3")}) >= 2  # it moved to newer versions
    for i in range(4):
        # The password is in no file the node wrote, and in none of its log lines.
        for f in [tmp_path / f"n{i}.log", *(tmp_path / f"n{i}").glob("*.json")]:
            assert f"pw-{i}" not in f.read_text(), f


def test_a_broker_restart_mid_run_delays_rollouts_and_loses_nothing_accepted(procs, warm_tiny_model_dir, tmp_path,
                                                                             certs):
    ids = _accounts(tmp_path, 3)
    m = broker_for(tmp_path / "broker", ids, certs, anonymous=False).start()
    try:
        steps = 30
        nodes = [procs.mqtt_node(f"n{i}", m.url("password", ids[i].peer_id), warm_tiny_model_dir,
                                 *_login_flags(tmp_path, i), "--train.steps", str(steps), "--train.seed", str(i),
                                 "--swarm.round_seconds", "1.5", "--run.checkpoint_every", "5")
                 for i in range(3)]
        wait_until(lambda: all(len(metrics(tmp_path / f"n{i}")) >= 5 for i in range(3)), 180,
                   "every node to train 5 steps", nodes[0])
        used_before = [dict(status(tmp_path / f"n{i}")["swarm"]["groups_used_by_peer"]) for i in range(3)]
        m.stop(kill=True)
        down_at = time.time()
        # They go on training on their own rollouts while the broker is away ...
        at_kill = [len(metrics(tmp_path / f"n{i}")) for i in range(3)]
        wait_until(lambda: all(len(metrics(tmp_path / f"n{i}")) >= at_kill[i] + 8 for i in range(3)), 90,
                   "8 steps without the broker", nodes[0])
        assert all(not status(tmp_path / f"n{i}")["swarm"]["connected"] for i in range(3))
        m.start()
        up_at = time.time()
        for i, p in enumerate(nodes):
            assert p.wait(timeout=240) == 0, (tmp_path / f"n{i}.log").read_text()[-3000:]
    finally:
        m.stop()
    for i in range(3):
        st, recs = status(tmp_path / f"n{i}")["swarm"], metrics(tmp_path / f"n{i}")
        assert len(recs) == steps and [r["step"] for r in recs] == list(range(1, steps + 1))
        assert st["reconnects"] >= 1 and st["connected"]
        # Once what arrived before the outage is out of the staleness window ((4 + 1) rounds of
        # 1.5 s), steps used no peer rollouts until the broker was back; after that, they did.
        during = [r for r in recs if down_at + 8 < r["time"] < up_at]
        after = [r for r in recs if r["time"] > up_at + 6]
        assert during and all(r["external_groups"] == 0 for r in during), during
        assert after and sum(r["external_groups"] for r in after) > 0
        # Nothing accepted was lost: every peer's count only grew.
        used = st["groups_used_by_peer"]
        assert all(used.get(p, 0) >= n for p, n in used_before[i].items())
        # Every envelope the node made went through its queue, and is accounted for.
        assert st["mqtt_queued"] >= steps
        assert st["mqtt_queued"] == sum(st.get(f"mqtt_{k}", 0) for k in ("published", "dropped", "expired",
                                                                          "replaced", "failed")) + st["queued"], st
        assert st.get("mqtt_dropped", 0) + st.get("mqtt_expired", 0) + st.get("mqtt_failed", 0) < st["mqtt_queued"]


ENVELOPE_ATTACKS = {  # what an honest node counts for each (node/sim/adversary/registry.py's table)
    "garbage": "malformed_envelope", "bad_signature": "bad_signature", "forged_reward": "unknown_field",
    "forged_truth": "unknown_field", "text_mismatch": "text_mismatch", "impersonation": "sender_mismatch",
    "logprob_1e300": "implausible_logprob", "logprob_1e4": "implausible_logprob",
    "special_tokens": "special_tokens", "future_created_at": "created_at_mismatch",
}


def test_the_hostile_peer_suites_envelope_attacks_through_the_broker(procs, warm_tiny_model_dir, tmp_path, certs):
    """An adversary with an account of its own (`swarm-node adversary`) cycles through every
    envelope attack; its replay, a write under an honest node's id, is refused by the broker's
    ACL. The honest nodes refuse each attack under its reason and go on training on each other."""
    ids = _accounts(tmp_path, 3)
    (tmp_path / "n2").rename(tmp_path / "adv")
    attacks = [*ENVELOPE_ATTACKS, "replay", "foreign_logprob_gap", "zero_advantage"]
    with broker_for(tmp_path / "broker", ids, certs, anonymous=False) as m:
        # Completions of 16 tokens: the adversary's are longer than 8, and a node drops (uncounted as a
        # rejection) completions longer than it trains on before checking them.
        common = ["--train.steps", "400", "--swarm.round_seconds", "1.5", "--generation.max_completion_length", "16"]
        honest = [procs.mqtt_node(f"n{i}", m.url("password", ids[i].peer_id), warm_tiny_model_dir,
                                  *_login_flags(tmp_path, i), "--train.seed", str(i), *common) for i in range(2)]
        adv = procs._spawn(["adversary", "--attacks", ",".join(attacks), "--swarm.transport", "mqtt",
                            "--swarm.broker", m.url("password", ids[2].peer_id), *_login_flags(tmp_path, 2),
                            "--run.dir", str(tmp_path / "adv"), "--model.name", str(warm_tiny_model_dir),
                            "--swarm.round_seconds", "1.5"], tmp_path / "adv.log")

        def counted() -> bool:
            try:
                sts = [status(tmp_path / f"n{i}")["swarm"] for i in range(2)]
                refused = status(tmp_path / "adv").get("refused", {})
            except (OSError, ValueError, KeyError):
                return False  # a status file being rewritten
            return refused.get("replay", 0) >= 1 and all(
                all(st["rejected"].get(r, 0) >= 1 for r in ENVELOPE_ATTACKS.values()) for st in sts)

        wait_until(counted, 240, "both honest nodes to refuse every attack", honest[0])
        for p in [*honest, adv]:
            p.send_signal(__import__("signal").SIGTERM)
        for p in [*honest, adv]:
            p.wait(timeout=60)
    for i in range(2):
        st = status(tmp_path / f"n{i}")["swarm"]
        other = ids[1 - i].peer_id
        assert st["groups_used_by_peer"].get(other, 0) > 0, st  # they still trained on each other
        assert set(st["rejected"]) <= set(ENVELOPE_ATTACKS.values()) | {"replay", "stale_round"}, st["rejected"]
    assert status(tmp_path / "adv")["refused"]["replay"] >= 1
