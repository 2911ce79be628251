"""Behind NAT over MQTT: nodes in two homes, each behind its own masquerading router, share rollouts
and weights through a broker in the public namespace by their outbound connections alone (slow;
needs root: tests/helpers/netns.py)."""

from __future__ import annotations

import re
import sys

import pytest

from swarm_node.protocol.identity import load_or_create_identity
from swarm_node.node.transport.mqtt.broker import mosquitto_binary
from tests.helpers.netns import PUBLIC_IP, ROUTER_WAN
from tests.helpers.procs import hostile_refusals, metrics, status
from tests.helpers.wait import wait_until
from tests.helpers.nat_fixtures import _namespaces_available, nat_net, nat_procs  # noqa: F401 - fixtures

pytestmark = [pytest.mark.slow, pytest.mark.netns, pytest.mark.broker, pytest.mark.subprocess]

PORT = 1883


def _broker(net, folder):
    """Mosquitto in the public namespace, listening on the public address only."""
    folder.mkdir()
    conf = folder / "mosquitto.conf"
    conf.write_text(f"listener {PORT} {PUBLIC_IP}\nallow_anonymous true\npersistence false\nuser root\n"
                    f"log_dest file {folder / 'mosquitto.log'}\nconnection_messages true\n")
    p = net.spawn("pub", [mosquitto_binary(), "-c", str(conf)], folder / "stdout")
    probe = f"import socket;socket.create_connection(('{PUBLIC_IP}',{PORT}),timeout=1)"
    # Reached from a home: the broker is up and the way out through the NAT works.
    wait_until(lambda: net.exec("h1", sys.executable, "-c", probe, check=False).returncode == 0, 30,
               "the broker to accept a connection from home 1", p)
    return p


def test_a_learner_and_a_full_node_in_one_home_and_a_worker_in_the_other(nat_net, nat_procs, warm_tiny_model_dir,
                                                                           tmp_path):
    """Learner in home 1; a full node and a worker following the learner in home 2. Rollouts cross
    both NATs both ways (learner and full node train on each other's, the learner on the worker's)
    and the learner's weight versions reach the worker, all through the broker."""
    _broker(nat_net, tmp_path / "broker")
    (tmp_path / "learner").mkdir()
    learner_id = load_or_create_identity(tmp_path / "learner" / "identity.pem").peer_id
    url = f"mqtt://{PUBLIC_IP}:{PORT}"
    steps = 8
    common = ["--train.steps", str(steps), "--swarm.round_seconds", "2", "--broadcast.max_staleness", "2"]
    nodes = {
        "learner": nat_procs.at("h1").mqtt_node("learner", url, warm_tiny_model_dir, "--role", "learner", *common),
        "full": nat_procs.at("h2").mqtt_node("full", url, warm_tiny_model_dir, "--train.seed", "1", *common),
        "worker": nat_procs.at("h2").mqtt_node("worker", url, warm_tiny_model_dir, "--role", "worker",
                                               "--follow", learner_id, "--train.seed", "2", *common),
    }
    for name, p in nodes.items():
        assert p.wait(timeout=240) == 0, (tmp_path / f"{name}.log").read_text()[-3000:]
    ids = {name: status(tmp_path / name)["swarm"]["peer_id"] for name in nodes}
    learner, full = status(tmp_path / "learner"), status(tmp_path / "full")
    assert set(learner["swarm"]["groups_used_by_peer"]) == {ids["full"], ids["worker"]}, learner["swarm"]
    assert ids["learner"] in full["swarm"]["groups_used_by_peer"], full["swarm"]
    assert learner["swarm"]["rejected_total"] == 0 and full["swarm"]["rejected_total"] == 0
    worker = status(tmp_path / "worker")["broadcast"]
    assert learner["broadcast"]["published_version"] >= 3
    assert worker["following"] == learner_id and worker["applied_versions"] >= 2, worker
    assert worker["bad_chunks"] == {}
    assert hostile_refusals(worker["manifests_refused"], learner["broadcast"]["published_version"]) == {}
    assert len(metrics(tmp_path / "learner")) == steps
    # Every node came in through its router: the broker saw only the two WAN addresses.
    seen = set(re.findall(r"New client connected from ([0-9.]+):", (tmp_path / "broker" / "mosquitto.log").read_text()))
    assert seen == set(ROUTER_WAN.values()), seen
