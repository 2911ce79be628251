"""The layout holds: no import runs up the stack (scripts/check_layout.py says which way is up), no
module outgrows one job (its MAX_LINES, with named exceptions), and every package's map (its
``__init__`` docstring) names each of its modules and nothing else."""

from __future__ import annotations

import check_layout  # scripts/ is on pytest's pythonpath
from tests.helpers.paths import ROOT


def test_no_import_runs_up_the_stack():
    _, bad, _ = check_layout.check()
    assert not bad, "\n".join(map(str, bad))


def test_no_module_is_over_the_size_limit():
    _, _, big = check_layout.check()
    assert not big, "\n".join(big)


def test_the_checker_sees_an_upward_import():
    # A transport importing the round loop, rewards reaching past the task id, carriers crossing.
    assert check_layout.violations_of("swarm_node.node.transport.base", [(1, "swarm_node.node.run.trainer")])
    assert check_layout.violations_of("swarm_node.rewards.registry", [(1, "swarm_node.protocol.codec")])
    assert not check_layout.violations_of("swarm_node.rewards.registry", [(1, "swarm_node.protocol.task_id")])
    assert check_layout.violations_of("swarm_node.node.transport.mqtt.link", [(1, "swarm_node.node.transport.hivemind.index")])
    assert check_layout.violations_of("swarm_node.node.run.trainer", [(1, "swarm_node.node.sim.runner")])
    assert not check_layout.violations_of("swarm_node.node.cli", [(1, "swarm_node.node.sim.runner")])
    assert not check_layout.violations_of("swarm_node.node.run.trainer", [(1, "swarm_node.node.transport.base")])
    # The one import name: a bare ``node``/``protocol``/... is someone else's package, or a second copy.
    assert check_layout.violations_of("swarm_node.node.run.trainer", [(1, "node.config.config")])
    assert check_layout.violations_of("swarm_node.rewards.registry", [(1, "protocol.task_id")])
    # The exchange, the round loop, the broadcast, the config, checkpoints, evaluation and doctor know no
    # carrier: they ask the registry.
    for blind in ("swarm_node.node.swarm.exchange", "swarm_node.node.run.trainer", "swarm_node.node.config.config",
                  "swarm_node.node.broadcast.peer", "swarm_node.node.checkpoint.resume", "swarm_node.node.evaluate.export",
                  "swarm_node.node.cli.doctor.command"):
        assert check_layout.violations_of(blind, [(1, "swarm_node.node.transport.mqtt.url")])
        assert not check_layout.violations_of(blind, [(1, "swarm_node.node.transport.carriers")])
    # The command line's parser may (it lists a carrier's own flags).
    assert not check_layout.violations_of("swarm_node.node.cli.parser", [(1, "swarm_node.node.transport.hivemind.settings")])


def test_no_carrier_name_is_spelled_outside_the_registry_and_its_folders():
    assert check_layout.carrier_names_spelled() == []


def test_the_checker_sees_a_carrier_name_spelled(tmp_path):
    (tmp_path / "node" / "run").mkdir(parents=True)
    (tmp_path / "node" / "transport" / "mqtt").mkdir(parents=True)
    (tmp_path / "node" / "run" / "x.py").write_text(
        '"""Over mqtt, every node dials out."""\nif transport == "mqtt":\n    pass\nkey = "mqtt_queued"\n')
    (tmp_path / "node" / "transport" / "mqtt" / "y.py").write_text('NAME = "mqtt"\n')
    # an exempt file's exemption holds only where it says: a dict key here, not a comparison
    (tmp_path / "node" / "run" / "trainer.py").write_text('fields = {"memory": 1}\nif t == "memory":\n    pass\n')
    found = check_layout.carrier_names_spelled(tmp_path, ("node",))
    assert len(found) == 2, found
    assert found[0].startswith("node/run/trainer.py:2: 'memory'")
    assert found[1].startswith("node/run/x.py:2: 'mqtt'")  # not the docstring, not its folder


def test_every_package_map_is_current():
    stale = check_layout.stale_package_maps()
    assert not stale, "\n".join(stale)


def test_the_checker_sees_a_stale_package_map(tmp_path):
    pkg = tmp_path / "node" / "swarm"
    (pkg / "sub").mkdir(parents=True)
    (pkg / "data").mkdir()  # no __init__.py: not a subpackage
    (tmp_path / "node" / "__init__.py").write_text('"""The node.\n\n    swarm/   the exchange\n"""\n')
    (pkg / "sub" / "__init__.py").write_text('"""Nothing here."""\n')
    for name in ("exchange.py", "pool.py", "__main__.py", "old_exchange.py"):
        (pkg / name).write_text("")
    (pkg / "__init__.py").write_text('''"""The exchange.

    exchange.py, __main__.py   the exchange and its command
    gone.py        a module that was removed
    sub/           a subpackage
    node/transport/pool.py     a path: a reference, not an entry (it names no child)
    docs/swarm.md  describes it

The old exchange (old_exchange.py) is kept for one release.
"""
''')
    assert check_layout.stale_package_maps(tmp_path, ("node",)) == [
        "node/swarm/__init__.py: its map leaves out pool.py",
        "node/swarm/__init__.py: its map names gone.py, which is not in node/swarm/",
    ]
    (pkg / "__init__.py").write_text('"""The exchange: exchange.py, pool.py, old_exchange.py and __main__.py."""\n')
    assert check_layout.stale_package_maps(tmp_path, ("node",)) == ["node/swarm/__init__.py: its map leaves out sub/"]


def test_the_architecture_page_embeds_the_current_module_map():
    doc = (ROOT / "docs" / "architecture.md").read_text()
    assert check_layout.module_map() in doc, \
        "docs/architecture.md's module map is stale: paste `python scripts/check_layout.py --map` into it"
