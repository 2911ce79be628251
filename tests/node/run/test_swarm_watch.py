"""node/run/swarm_watch.py: a node that hears no peer of its --swarm.name says so, naming the likely
cause; a worker says which learner it waits for at once, and that none such is heard of after a
bounded time."""

from __future__ import annotations

import asyncio
import json
import logging
from collections import Counter
from types import SimpleNamespace

import pytest

from swarm_node.node.run import swarm_watch
from swarm_node.node.config.config import load_config
from swarm_node.node.transport.memory import MemoryHub
from tests.helpers.swarm_helpers import create_node, run_all, swarm_cfg

pytestmark = pytest.mark.usefixtures("one_torch_thread")

LEARNER = "sn1" + "b" * 32


def test_a_node_of_another_swarm_name_warns_and_its_summary_says_so(tiny_model_dir, tmp_path, monkeypatch, caplog):
    monkeypatch.setattr(swarm_watch, "ALONE_MIN_S", 0.0)  # 4 rounds of 0.6 s
    caplog.set_level(logging.INFO)
    hub = MemoryHub()

    async def go():
        cfgs = [swarm_cfg(tiny_model_dir, tmp_path / f"n{i}", **{"swarm.name": name, "train.steps": 8})
                for i, name in enumerate(["alpha", "alpha", "beta"])]
        nodes = [await create_node(c, hub) for c in cfgs]
        return await run_all(nodes)

    asyncio.run(go())
    warned = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING and "heard no peer" in r.getMessage()]
    assert len(warned) == 1 and "heard no peer of swarm 'beta'" in warned[0]  # the two alphas hear each other
    assert "are the peers using another --swarm.name?" in warned[0]
    note = json.loads((tmp_path / "n2" / "status.json").read_text())["note"]
    assert note == "heard no peer of swarm 'beta': are the peers using another --swarm.name?"
    assert "heard no peer" not in json.loads((tmp_path / "n0" / "status.json").read_text()).get("note", "")


def _fake_swarm(info: dict):
    return SimpleNamespace(peers={}, stats=SimpleNamespace(groups_in=Counter()), transport=SimpleNamespace(info=lambda: info),
                           _task=object(), _loop=object())


def test_a_worker_names_its_learner_at_once_and_says_when_none_is_heard_of(monkeypatch, caplog):
    monkeypatch.setattr(swarm_watch, "ALONE_MIN_S", 0.0)
    monkeypatch.setattr(swarm_watch, "POLL_S", 0.02)
    caplog.set_level(logging.INFO)
    cfg = load_config(None, {"swarm.transport": "hivemind", "swarm.round_seconds": 0.25, "broadcast.role": "worker",
                             "broadcast.follow": LEARNER, "swarm.name": "mine"})
    swarm = _fake_swarm({"routing_peers": 2})
    swarm.peers["sn1" + "c" * 32] = object()  # another peer of the swarm: not the learner
    written = {}
    status = SimpleNamespace(extra={}, write=lambda **f: (written.update(f), status.extra.update(f)))

    async def go():
        task = asyncio.ensure_future(swarm_watch.watch_swarm(cfg, swarm, status, lambda: {}, False))
        await asyncio.sleep(0)
        await asyncio.sleep(0)
        said = [r.getMessage() for r in caplog.records]
        assert any(f"waiting for the weights of learner {LEARNER} in swarm 'mine'" in m for m in said)
        while "note" not in written:
            await asyncio.sleep(0.02)
        swarm.peers[LEARNER] = object()  # it turns up: the note goes, and the watch ends
        await asyncio.wait_for(task, 10)

    asyncio.run(go())
    warning = next(r.getMessage() for r in caplog.records if r.levelno == logging.WARNING)
    assert warning.startswith(f"no learner {LEARNER} has been heard of in swarm 'mine' after ")
    assert "check --follow" in warning and "heard 1 other peer(s)" in warning
    assert written["note"].startswith(f"no learner {LEARNER} has been heard of") and "note" not in status.extra
    assert any(f"heard learner {LEARNER} of swarm 'mine' after all" in r.getMessage() for r in caplog.records)


@pytest.mark.parametrize("info, peers, in_process, expected", [
    ({"routing_peers": 1}, [], False, "1 peer(s) in its DHT routing table"),
    ({"connected": True, "broker": "mqtt://h:1883"}, [], False, "the broker mqtt://h:1883"),
    ({"connected": 3}, [], False, "3 connected peer(s)"),
    ({"routing_peers": 0}, [], False, None),  # the first node of a new swarm: nothing to warn about
    ({}, [], True, "the in-process hub"),
])
def test_what_a_node_reached_besides_its_swarm(info, peers, in_process, expected):
    assert swarm_watch.reached(info, peers, in_process) == expected


def test_a_node_names_the_swarms_its_connected_peers_are_in(monkeypatch, caplog):
    monkeypatch.setattr(swarm_watch, "ALONE_MIN_S", 0.0)
    monkeypatch.setattr(swarm_watch, "POLL_S", 0.02)
    cfg = load_config(None, {"swarm.transport": "libp2p", "swarm.round_seconds": 0.25, "swarm.name": "alpha",
                             "swarm.initial_peers": ["/ip4/127.0.0.1/tcp/1/p2p/12D3KooWM8aByEo7zCu8VenXkDgs5Z52C5UefjziKWKtSoo8i524"]})
    swarm = _fake_swarm({"connected": 2, "other_swarms": ["beta"]})
    status = SimpleNamespace(extra={}, write=lambda **f: status.extra.update(f))

    async def go():
        task = asyncio.ensure_future(swarm_watch.watch_swarm(cfg, swarm, status, lambda: {}, False))
        while "note" not in status.extra:
            await asyncio.sleep(0.02)
        swarm._task = None  # the node closes its exchange: the watch ends
        await asyncio.wait_for(task, 10)

    asyncio.run(go())
    warning = next(r.getMessage() for r in caplog.records if r.levelno == logging.WARNING)
    assert "heard no peer of swarm 'alpha'" in warning and "connected peers are in swarm 'beta'" in warning
    assert "--swarm.name beta" in warning
    assert status.extra["note"].endswith("(connected peers are in swarm 'beta')")
