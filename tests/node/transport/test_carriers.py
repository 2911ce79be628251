"""The carrier table (node/transport/carriers.py): every carrier the config names is in it, an
unknown name is refused as before, its traits are the ones the node, the simulator and the CLI
decide by, and importing it imports no carrier's transport (hivemind and py-libp2p cannot share a
process)."""

from __future__ import annotations

import ast
import dataclasses
import subprocess
import sys
import typing
from pathlib import Path
from types import SimpleNamespace

import pytest

from swarm_node.node.errors import ConfigError
from swarm_node.node.config.config import SwarmConfig
from swarm_node.node.transport import TransportError, create_transport
from swarm_node.node.transport.carriers import CARRIERS, Carrier, carrier
from swarm_node.protocol.identity import Identity
from tests.helpers.paths import ROOT

UNKNOWN = "unknown transport 'none'; choose memory, hivemind, mqtt or libp2p"


def _named(trait: str) -> set[str]:
    return {name for name, c in CARRIERS.items() if getattr(c, trait)}


def test_every_carrier_the_config_accepts_is_in_the_table_under_its_name():
    accepted = set(typing.get_args(SwarmConfig.model_fields["transport"].annotation)) - {"none"}
    assert set(CARRIERS) == accepted
    for name in accepted:
        assert isinstance(carrier(name), Carrier) and carrier(name).name == name


def test_an_unknown_name_is_refused_naming_the_choices():
    with pytest.raises(ValueError) as e:
        carrier("none")
    assert str(e.value) == UNKNOWN
    with pytest.raises(ValueError) as e:
        create_transport("none", swarm="s", publisher="p")
    assert str(e.value) == UNKNOWN


def test_an_entry_cannot_be_changed():
    with pytest.raises(dataclasses.FrozenInstanceError):
        carrier("mqtt").needs_broker = False  # type: ignore[misc]


def test_the_traits_are_what_the_node_the_simulator_and_the_cli_decide_by():
    assert _named("in_process") == {"memory"}  # sim: one worker process, one log, no faults or roles
    assert _named("joins_through_bootstrap") == {"hivemind", "libp2p"}  # join: --bootstrap or --new-swarm
    assert _named("needs_broker") == {"mqtt"}  # config: swarm.broker; sim: its own Mosquitto
    assert _named("has_dht_index") == {"hivemind"}  # the raw and sybil attacks
    assert _named("uses_nat_traversal") == {"hivemind"}  # --no-relay, --no-nat, use_relay, nat_port_map
    assert _named("join_default") == {"hivemind"}  # join with no carrier and no broker named
    for name in _named("joins_through_bootstrap"):
        c = carrier(name)
        assert c.bootstrap_key and c.local_peer and c.load_bootstrap is not None
    assert carrier("hivemind").bootstrap_key == "bootstrap.p2p.key"
    assert carrier("libp2p").bootstrap_key == "bootstrap.libp2p.pem"
    assert all(c.load_bootstrap is None and not c.bootstrap_key for n, c in CARRIERS.items()
               if n not in _named("joins_through_bootstrap"))


def test_the_cli_offers_what_the_table_holds():
    from swarm_node.node.cli.parser import build_parser
    from swarm_node.node.cli.train import JOIN_TRANSPORTS

    assert JOIN_TRANSPORTS == ("hivemind", "mqtt", "libp2p")
    subs = next(a for a in build_parser()._actions if a.dest == "command").choices
    choices = {cmd: next(a for a in subs[cmd]._actions if a.dest == "transport").choices
               for cmd in ("join", "bootstrap", "sim")}
    assert set(choices["sim"]) == set(CARRIERS)
    assert set(choices["join"]) == set(JOIN_TRANSPORTS)
    assert set(choices["bootstrap"]) == _named("joins_through_bootstrap")


def test_memory_is_built_from_the_swarm_name_alone():
    from swarm_node.node.transport.memory import MemoryHub, MemoryTransport

    ident = Identity.generate()
    assert carrier("memory").transport_kwargs(SwarmConfig(transport="memory"), ident, p2p_identity_path="x",
                                              on_retry=None) == {}
    t = create_transport("memory", swarm="s", publisher=ident.peer_id, hub=MemoryHub())
    assert isinstance(t, MemoryTransport) and carrier("memory").load_transport() is MemoryTransport


def test_each_carrier_reads_its_own_settings():
    ident = Identity.generate()
    peers = ["/ip4/10.0.0.1/tcp/31337/p2p/QmWyMywt33NGEr2d32nqvpPeQq36fd3tj9eZaiBj2CbKSM"]
    sc = SwarmConfig(transport="hivemind", initial_peers=peers, host_maddrs=["/ip4/127.0.0.1/tcp/0"],
                     announce_maddrs=["/ip4/1.2.3.4/tcp/5"], use_relay=False, nat_port_map=False, startup_timeout=7.0,
                     join_retries=2, join_backoff=0.5, round_seconds=3.0)
    retry = print
    hm = carrier("hivemind").transport_kwargs(sc, ident, p2p_identity_path=None, on_retry=retry)
    assert hm == dict(initial_peers=peers, host_maddrs=["/ip4/127.0.0.1/tcp/0"], announce_maddrs=["/ip4/1.2.3.4/tcp/5"],
                      startup_timeout=7.0, join_retries=2, join_backoff=0.5, use_relay=False, nat_port_map=False,
                      behind_nat=False, round_seconds=3.0, signer=ident, on_retry=retry)
    kept = carrier("hivemind").transport_kwargs(sc, ident, p2p_identity_path="/r/identity.pem.p2p", on_retry=None)
    assert kept["p2p_identity_path"] == "/r/identity.pem.p2p"  # only when given: hivemind's default otherwise
    lp = carrier("libp2p").transport_kwargs(sc, ident, p2p_identity_path="ignored", on_retry=retry)
    assert lp == dict(identity=ident, listen=["/ip4/127.0.0.1/tcp/0"], bootstrap=peers,
                      announce_addrs=["/ip4/1.2.3.4/tcp/5"], round_seconds=3.0, startup_timeout=7.0, join_retries=2,
                      join_backoff=0.5, on_retry=retry)
    mq = carrier("mqtt").transport_kwargs(SwarmConfig(transport="mqtt", broker="mqtt://node@10.0.0.9:1884",
                                                      startup_timeout=7.0, join_retries=2, join_backoff=0.5),
                                          ident, p2p_identity_path=None, on_retry=retry)
    assert mq["broker"].url == "mqtt://node@10.0.0.9:1884"
    assert {k: v for k, v in mq.items() if k != "broker"} == dict(connect_timeout=7.0, join_retries=2,
                                                                  join_backoff=0.5, on_retry=retry)


def test_a_missing_py_libp2p_is_a_transport_error_naming_the_extra(monkeypatch):
    monkeypatch.setitem(sys.modules, "swarm_node.node.transport.libp2p.transport", None)  # its import fails
    with pytest.raises(TransportError, match=r"needs py-libp2p: pip install 'swarm-node\[libp2p\]'"):
        carrier("libp2p").load_transport()


def test_the_simulator_joins_each_carrier_as_before():
    from swarm_node.node.sim.argv import join_flags

    loopback = ["--swarm.host_maddrs", '["/ip4/127.0.0.1/tcp/0"]']
    assert join_flags("hivemind", "/m", None) == ["--bootstrap", "/m", *loopback, "--swarm.use_relay", "false",
                                                  "--swarm.nat_port_map", "false"]
    assert join_flags("libp2p", "/m", None) == ["--transport", "libp2p", "--bootstrap", "/m", *loopback]
    assert join_flags("mqtt", None, "mqtt://127.0.0.1:1") == ["--transport", "mqtt", "--broker", "mqtt://127.0.0.1:1"]


def test_memory_runs_the_simulation_in_one_process_and_refuses_faults():
    from swarm_node.node.sim.faults import SimFaults
    from swarm_node.node.sim.spec import SimSpec, node_log, processes

    assert not processes(SimSpec(nodes=2, transport="memory", run_dir=Path("/r")))
    assert node_log(SimSpec(nodes=2, transport="memory", run_dir=Path("/r")), 1) == Path("/r/nodes.log")
    assert node_log(SimSpec(nodes=2, transport="libp2p", run_dir=Path("/r")), 1) == Path("/r/node1/node.log")
    kill = SimFaults.model_validate({"kill": [{"node": 0, "at_step": 2}]})
    with pytest.raises(ConfigError, match="one process"):
        kill.check(2, "memory")
    dht = SimFaults.model_validate({"malicious": [{"attacks": ["flood"]}]})
    dht.check(2, "hivemind")
    for name in ("mqtt", "libp2p"):
        with pytest.raises(ConfigError, match="write into the hivemind DHT"):
            dht.check(2, name)


def test_joining_says_what_each_carrier_starts_first():
    from swarm_node.node.run.startup import _joining

    def cfg(transport: str, **kw) -> SimpleNamespace:
        return SimpleNamespace(swarm=SwarmConfig(transport=transport, **kw))

    boot = "/ip4/10.0.0.1/tcp/31337/p2p/QmWyMywt33NGEr2d32nqvpPeQq36fd3tj9eZaiBj2CbKSM"
    peers = [boot]
    assert _joining(cfg("hivemind", initial_peers=peers), None) == f"starting the p2p daemon, then contacting {boot}"
    assert _joining(cfg("libp2p", initial_peers=peers), None) == f"starting the libp2p host, then contacting {boot}"
    assert _joining(cfg("hivemind"), None) == "hivemind"  # a new swarm: nobody to contact
    assert _joining(cfg("mqtt", broker="mqtt://10.0.0.9"), None) == "connecting to the broker at mqtt://10.0.0.9:1883"
    assert _joining(cfg("none"), None) == "none"
    assert _joining(cfg("hivemind", initial_peers=peers), object()) == "hivemind"  # a transport was given


# -- the table imports no carrier's transport ---------------------------------------------------

# What no module the table imports at load time may import: the carriers' libraries, and the
# carrier modules that import them.
HEAVY = ("hivemind", "libp2p", "multiaddr", "trio", "paho", "swarm_node.node.transport.hivemind.transport",
         "swarm_node.node.transport.libp2p.transport", "swarm_node.node.transport.mqtt.transport")


def _load_time_imports(path: Path) -> list[str]:
    """The absolute imports a module runs when it is loaded (not those inside functions)."""
    found: list[str] = []

    def walk(body: list[ast.stmt]) -> None:
        for stmt in body:
            if isinstance(stmt, ast.Import):
                found.extend(a.name for a in stmt.names)
            elif isinstance(stmt, ast.ImportFrom) and stmt.level == 0 and stmt.module:
                found.extend(f"{stmt.module}.{a.name}" for a in stmt.names)
                found.append(stmt.module)
            elif not isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef)):
                for field in ("body", "orelse", "finalbody", "handlers"):
                    walk(getattr(stmt, field, []))

    walk(ast.parse(path.read_text()).body)
    return found


def _project_file(module: str) -> Path | None:
    parts = module.split(".")
    if parts[0] == "swarm_node" and len(parts) > 1:
        parts = parts[1:]  # swarm_node.node is the repository's node/ folder
    base = ROOT.joinpath(*parts)
    return next((p for p in (base.with_suffix(".py"), base / "__init__.py") if p.is_file()), None)


def test_the_table_loads_no_carrier_library():
    seen: set[str] = set()
    todo = ["swarm_node.node.transport.carriers"]
    while todo:
        module = todo.pop()
        parts = module.split(".")
        for k in range(1, len(parts) + 1):  # a package's __init__ runs before its modules
            name = ".".join(parts[:k])
            path = _project_file(name)
            if name in seen or path is None:
                continue
            seen.add(name)
            todo.extend(_load_time_imports(path))
        heavy = [h for h in HEAVY if module == h or module.startswith(h + ".")]
        assert not heavy, f"loading node.transport.carriers imports {module}"
    assert {"swarm_node.node.transport.hivemind.settings", "swarm_node.node.transport.libp2p.settings",
            "swarm_node.node.transport.mqtt.settings"} <= seen  # the walk did reach each carrier's settings


@pytest.mark.subprocess
def test_importing_the_table_in_a_fresh_interpreter_imports_neither_hivemind_nor_libp2p():
    code = ("import sys, swarm_node.node.transport.carriers, swarm_node.node.transport.from_config\n"
            "bad = sorted(m for m in sys.modules if m.split('.')[0] in ('hivemind', 'libp2p')\n"
            "             or m in ('swarm_node.node.transport.hivemind.transport', 'swarm_node.node.transport.libp2p.transport'))\n"
            "assert not bad, bad\n")
    r = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
