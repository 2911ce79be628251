"""A component built from a config section takes the config's defaults, never its own: each of
its keyword defaults that has a same-named field in its section must equal the config's (the
library's loss default once differed from the node's; the exchange's sender share was 1.0 where
the config says 0.5). A default that means something else on purpose is listed, with why."""

from __future__ import annotations

import dataclasses
import importlib
import inspect
import json
import subprocess
import sys

import pytest

from swarm_node.node.config.config import NodeConfig

# component ("module:name") -> the config sections it is built from
COMPONENTS = {
    "swarm_node.node.swarm.exchange:SwarmExchange": ("swarm",),
    "swarm_node.node.transport.hivemind.transport:HivemindTransport": ("swarm",),
    "swarm_node.node.transport.hivemind.daemon:start_dht_node": ("swarm",),
    "swarm_node.node.transport.mqtt.transport:MqttTransport": ("swarm",),
    "swarm_node.node.transport.mqtt.link:MqttLink": ("swarm",),
    "swarm_node.node.broadcast.peer:BroadcastPeer": ("broadcast",),
    "swarm_node.policies.loss:LossConfig": ("learner",),
    "swarm_node.rewards.scoring:RewardConfig": ("tasks",),
}
LIBP2P = {"swarm_node.node.transport.libp2p.transport:Libp2pTransport": ("swarm",)}  # its own process

# (component, parameter) -> why its default differs from the config's on purpose
MEANS_SOMETHING_ELSE = {
    ("SwarmExchange", "external_groups"): "None: J not known, fetch everything (the node passes the config's J)",
    ("MqttTransport", "broker"): "None: no broker given (the config's empty string means the same, checked there)",
    ("BroadcastPeer", "follow"): "None: follows no one (the config's empty string; the role passes it)",
    ("RewardConfig", "answer"): "the config's 'auto' is resolved to a reading by the model's kind before this is built",
    ("HivemindTransport", "host_maddrs"): "loopback: one built without a config (scripts, tests) stays on this "
                                          "machine; the node passes the config's",
    ("start_dht_node", "announce_maddrs"): "None: none announced (the config's empty list)",
}


def _defaults(target: str) -> dict[str, object]:
    module, name = target.split(":")
    obj = getattr(importlib.import_module(module), name)
    if dataclasses.is_dataclass(obj):  # a default factory's value, not its sentinel
        return {f.name: f.default if f.default is not dataclasses.MISSING else f.default_factory()
                for f in dataclasses.fields(obj)
                if f.default is not dataclasses.MISSING or f.default_factory is not dataclasses.MISSING}
    return {pn: p.default for pn, p in inspect.signature(obj).parameters.items()
            if p.default is not inspect.Parameter.empty}


def _config_fields(section: str) -> dict[str, object]:
    sec = getattr(NodeConfig(), section)
    return {k: getattr(sec, k) for k in type(sec).model_fields}


def _differences(target: str, sections: tuple[str, ...], defaults: dict) -> list[str]:
    name = target.split(":")[1]
    out = []
    for section in sections:
        for field, value in _config_fields(section).items():
            if field in defaults and defaults[field] != value and (name, field) not in MEANS_SOMETHING_ELSE:
                out.append(f"{name}({field}={defaults[field]!r}) but [{section}] {field} = {value!r}")
    return out


@pytest.mark.parametrize("target", sorted(COMPONENTS))
def test_a_components_defaults_are_its_config_sections(target):
    assert not _differences(target, COMPONENTS[target], _defaults(target))


@pytest.mark.subprocess
def test_the_libp2p_transports_defaults_are_the_swarm_sections():
    # py-libp2p and hivemind each register protobuf symbols of the same names: not in one process.
    [(target, sections)] = LIBP2P.items()
    code = ("import inspect, json, importlib; m, n = %r.split(':'); o = getattr(importlib.import_module(m), n); "
            "print(json.dumps({k: p.default for k, p in inspect.signature(o).parameters.items() "
            "if p.default is not inspect.Parameter.empty and isinstance(p.default, (int, float, str, bool))}))" % target)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert not _differences(target, sections, json.loads(out.strip().splitlines()[-1]))


def test_the_check_sees_a_default_that_differs():
    assert _differences("x:SwarmExchange", ("swarm",), {"max_sender_share": 1.0}) == [
        "SwarmExchange(max_sender_share=1.0) but [swarm] max_sender_share = 0.5"]
