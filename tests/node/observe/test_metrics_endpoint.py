"""The Prometheus endpoint serves the same numbers as status.json."""

from __future__ import annotations

import asyncio
import json
import time
import urllib.request

import pytest
from prometheus_client.parser import text_string_to_metric_families

from swarm_node.node.config.config import load_config
from swarm_node.node.errors import ConfigError
from swarm_node.node.transport.memory import MemoryHub

from tests.helpers.swarm_helpers import create_node, swarm_cfg  # noqa: E402


def scrape(port: int) -> dict:
    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10).read().decode()
    out = {}
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


def test_swarm_node_metrics_match_its_status(warm_tiny_model_dir, tmp_path):
    hub = MemoryHub()
    cfg = swarm_cfg(warm_tiny_model_dir, tmp_path / "n", **{"train.steps": 3, "run.metrics_port": 0})

    async def go():
        node = await create_node(cfg, hub)
        hub.put(cfg.swarm.name, node.swarm.clock.current(), "sn1garbage", b"not an envelope", time.time() + 60)
        try:
            await node.run()
            metrics = await asyncio.to_thread(scrape, node.endpoint.port)
            return metrics, json.loads((node.run_dir / "status.json").read_text())
        finally:
            await node.close()

    m, status = asyncio.run(go())
    last, sw = status["last"], status["swarm"]
    assert m[("swarm_node_step", ())] == status["step"] == 3
    assert m[("swarm_node_reward", ())] == pytest.approx(last["reward"])
    assert m[("swarm_node_rho", ())] == pytest.approx(last["rho"])
    assert m[("swarm_node_round", ())] == last["round"]
    assert m[("swarm_node_rollouts_out_total", ())] == sw["rollouts_out"] == 3 * 2 * 4
    assert m[("swarm_node_rejected_total", (("reason", "malformed_envelope"),))] == sw["rejected"]["malformed_envelope"] == 1
    info = [k for k in m if k[0] == "swarm_node_node_info"]
    assert info and dict(info[0][1])["peer_id"] == sw["peer_id"]


def test_metrics_endpoint_is_off_by_default_and_port_clash_is_a_clear_error(tiny_model_dir, tmp_path):
    assert load_config(None, {}).run.metrics_port is None
    import socket

    from swarm_node.node.run.trainer import TrainingNode

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        cfg = load_config(None, {"model.name": str(tiny_model_dir), "run.dir": str(tmp_path / "r"),
                                 "run.metrics_port": port, "run.progress": "off"})
        with pytest.raises(ConfigError, match=f"cannot serve metrics on 127.0.0.1:{port}"):
            asyncio.run(TrainingNode.create(cfg))


def test_an_mqtt_nodes_broker_link_and_outgoing_queue_are_exported():
    from swarm_node.node.observe.endpoint import MetricsEndpoint

    swarm = {"transport": "mqtt", "peer_id": "sn1" + "a" * 32, "peers_alive": 2, "peers_heard": 2, "pool": 0,
             "rollouts_out": 10, "groups_in": 4, "groups_used": 4, "dropped_stale": 0, "rejected": {},
             "broker": "mqtt://broker.example:1883", "connected": False, "reconnects": 3, "queued": 2,
             "mqtt_queued": 7, "mqtt_published": 4, "mqtt_dropped": 1}
    ep = MetricsEndpoint("127.0.0.1", 0)
    port = ep.start()
    try:
        ep.update({"step": 5, "last": {}, "swarm": swarm})
        m = scrape(port)
    finally:
        ep.close()
    assert m[("swarm_node_broker_connected", ())] == 0
    assert m[("swarm_node_broker_reconnects_total", ())] == 3
    assert m[("swarm_node_outgoing_queued", ())] == 2
    fates = {dict(k[1])["fate"]: v for k, v in m.items() if k[0] == "swarm_node_outgoing_total"}
    assert fates == {"queued": 7, "published": 4, "dropped": 1, "expired": 0, "replaced": 0, "failed": 0}
