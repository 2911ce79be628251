"""Task sources in a swarm (rewards/sources.py): nodes holding the same dataset train on each
other's groups, regenerating each id from their own copy; a node with another version of it (one
answer changed) is honest but of no use to them: its groups are left out and counted, the rest of
its batch kept; a batch of nothing else is refused (not passed on), and only a sustained run of
them backs the sender off (node/swarm/unusable.py)."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

from swarm_node.node.transport.base import Delivery
from swarm_node.node.transport.memory import MemoryHub
from swarm_node.protocol.codec import encode
from swarm_node.protocol.identity import Identity
from swarm_node.rewards.registry import resolve_families
from tests.helpers.exchange import batch, clock_at, envelope, make_exchange, record
from tests.helpers.swarm_helpers import create_node, run_all, swarm_cfg

# Questions and answers in the embedded tokenizer's alphabet (rewards/task.py ALPHABET).
ROWS = [{"question": f"double {i}", "answer": str(2 * i)} for i in range(1, 13)]


def _data(path: Path, rows=ROWS) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def test_a_group_of_a_family_this_node_lacks_is_left_out_and_the_rest_kept(tmp_path):
    [mine] = resolve_families([f"jsonl:{_data(tmp_path / 'doubles.jsonl')}"])
    hub, me, peer = MemoryHub(), Identity.generate(), Identity.generate()
    ex = make_exchange(hub, me, clock_at(10))
    theirs = mine[:-8] + "0" * 8  # the same file name, other content: another digest
    records = [record(f"{mine}:5:1"), record(f"{theirs}:5:1"), record("arithmetic:1:1")]
    assert ex.admit(Delivery(10, peer.peer_id, envelope(peer, encode(batch(peer, 10, records))))) == 2
    assert not ex.stats.rejected and ex.stats.dropped_unknown_family == 1
    assert ex.status()["dropped_unknown_family"] == 1
    assert {g.task_id for g in ex.pool.groups.values()} == {f"{mine}:5:1", "arithmetic:1:1"}
    distrusted = []
    ex.transport.distrust = lambda publisher, r: distrusted.append(publisher)
    only_theirs = [record(f"{theirs}:6:1")]
    d = Delivery(11, peer.peer_id, envelope(peer, encode(batch(peer, 11, only_theirs)), seq=2))
    assert ex.admit(d) == 0
    assert not ex.stats.rejected and ex.stats.dropped_unknown_family == 2 and distrusted == []  # not its fault
    assert ex.stats.unusable_batches == 1 and ex.status()["unusable_batches"] == 1
    assert ex.stats.envelopes_in == 1  # the unusable batch was not admitted (a gossip gate refuses it too)


def test_nodes_holding_the_same_dataset_train_on_each_others_groups(warm_tiny_model_dir, tmp_path):
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    same_a, same_b = _data(tmp_path / "a" / "doubles.jsonl"), _data(tmp_path / "b" / "doubles.jsonl")
    common = {"train.steps": 5, "tasks.difficulties": [1], "eval.at_end": True, "eval.tasks_per_family": 4,
              "eval.samples": 1}
    cfgs = [swarm_cfg(warm_tiny_model_dir, tmp_path / "n0", **common, **{"train.seed": 0,
                      "tasks.families": [f"jsonl:{same_a}"]}),
            swarm_cfg(warm_tiny_model_dir, tmp_path / "n1", **common, **{"train.seed": 1,
                      "tasks.families": [f"jsonl:{same_b}", "counting"]})]
    shared, = {c.tasks.names[0] for c in cfgs}  # two copies of one file: one family
    assert shared.startswith("doubles_")

    async def go():
        hub = MemoryHub()
        nodes = [await create_node(c, hub) for c in cfgs]
        return await run_all(nodes), nodes

    summaries, nodes = asyncio.run(go())
    ids = [n.swarm.peer_id for n in nodes]
    for s in summaries:
        assert s["steps"] == 5 and s["swarm"]["rejected_total"] == 0, s["swarm"]["rejected"]
        assert s["swarm"]["dropped_unknown_family"] == 0
    assert ids[1] in summaries[0]["swarm"]["groups_used_by_peer"]  # node1's dataset and counting groups
    assert ids[0] in summaries[1]["swarm"]["groups_used_by_peer"]
    # The held-out evaluation is per family, the dataset's under its name.
    recs = [json.loads(line) for line in (nodes[1].run_dir / "metrics.jsonl").read_text().splitlines()]
    assert set(recs[-1]["eval"]["families"]) == {shared, "counting"}
    assert recs[-1]["eval"]["families"][shared]["n"] >= 1


def _sources(kind: str, tmp_path: Path) -> tuple[str, str]:
    """(what node0 and node1 train on, node2's other version of it)."""
    if kind == "jsonl":
        data = _data(tmp_path / "doubles.jsonl")
        other = _data(tmp_path / "doubles_v2.jsonl", [*ROWS[:-1], {"question": "double 12", "answer": "25"}])
        return f"jsonl:{data}", f"jsonl:{other}"
    if kind == "module":  # a user's family: node2's copy answers one question differently
        code = ("from swarm_node.rewards import Family\n\n"
                "def generate(rng, difficulty):\n"
                "    a = rng.randint(1, 9)\n"
                "    return f'double {a}', str(2 * a{tweak})\n\n"
                "FAMILY = Family(name='doubling', max_difficulty=1, description='double a digit',\n"
                "                generator=generate, normalizer=str.strip)\n")
        (tmp_path / "doubling.py").write_text(code.replace("{tweak}", ""))
        (tmp_path / "doubling_v2.py").write_text(code.replace("{tweak}", " + (a == 9)"))
        return f"module:{tmp_path / 'doubling.py'}", f"module:{tmp_path / 'doubling_v2.py'}"
    pytest.importorskip("reasoning_gym")
    return ("rg:basic_arithmetic:{\"max_terms\": 3, \"max_digits\": 2}",
            "rg:basic_arithmetic:{\"max_terms\": 2, \"max_digits\": 2}")


@pytest.mark.slow
@pytest.mark.daemon
@pytest.mark.subprocess
@pytest.mark.parametrize("kind", ["jsonl", "module", "reasoning-gym"])
def test_over_hivemind_a_node_with_another_version_of_the_source_is_left_out(kind, warm_tiny_model_dir, tmp_path):
    """Three join processes (swarm-node sim over hivemind, each node its own process and registry):
    node0 and node1 train on the same source, node2 on another version of it (a dataset with one
    answer changed; a family module whose generator differs on one question; a reasoning-gym dataset
    with another config). Receivers regenerate every id."""
    from tests.helpers.sim_procs import alive, start_sim, wait_watching

    same, other = _sources(kind, tmp_path)
    faults = tmp_path / "faults.toml"
    faults.write_text("[[node]]\nindex = 2\nflags = { \"tasks.families\" = [" + json.dumps(other) + "] }\n")
    p = start_sim(tmp_path, warm_tiny_model_dir, "--nodes", "3", "--transport", "hivemind", "--train.steps", "8",
                  "--swarm.round_seconds", "1.5", "--tasks.families", json.dumps([same]),
                  "--eval.at_end", "true", "--eval.tasks_per_family", "4", "--faults", str(faults))
    seen: set[int] = set()
    assert wait_watching(p, seen, 400) == 0, (tmp_path / "sim.log").read_text()[-3000:]
    assert alive(seen) == set()
    status = {i: json.loads((tmp_path / "sim" / f"node{i}" / "status.json").read_text()) for i in range(3)}
    peer = {i: status[i]["swarm"]["peer_id"] for i in range(3)}
    got = {i: status[i]["swarm"]["groups_in_by_peer"] for i in range(3)}
    for i in range(3):
        assert status[i]["step"] == 8 and status[i]["swarm"]["rejected_total"] == 0, status[i]["swarm"]["rejected"]
    assert got[0].get(peer[1], 0) > 0 and got[1].get(peer[0], 0) > 0  # the same file: shared
    assert got[0].get(peer[2], 0) == 0 and got[1].get(peer[2], 0) == 0  # the other version: left out ...
    assert got[2].get(peer[0], 0) == 0 and got[2].get(peer[1], 0) == 0
    assert all(status[i]["swarm"]["dropped_unknown_family"] > 0 for i in range(3))  # ... and counted
    # Each node's held-out evaluation is on its own copy's family: the two versions are two families.
    last = [json.loads((tmp_path / "sim" / f"node{i}" / "metrics.jsonl").read_text().splitlines()[-1]) for i in range(3)]
    fams = [set(r["eval"]["families"]) for r in last]
    assert fams[0] == fams[1] != fams[2] and all(len(f) == 1 for f in fams)


def test_a_run_on_a_one_row_dataset_trains_and_evaluates_nothing_of_it(warm_tiny_model_dir, tmp_path):
    from tests.helpers.swarm_helpers import train_to_end

    data = _data(tmp_path / "one.jsonl", ROWS[:1])
    cfg = swarm_cfg(warm_tiny_model_dir, tmp_path / "run", **{"swarm.transport": "none", "train.steps": 2,
                                                              "tasks.families": [f"jsonl:{data}", "counting"],
                                                              "eval.at_end": True, "eval.tasks_per_family": 2,
                                                              "eval.samples": 1})
    assert train_to_end(cfg)["steps"] == 2
    last = json.loads((tmp_path / "run" / "metrics.jsonl").read_text().splitlines()[-1])
    assert set(last["eval"]["families"]) == {"counting"}  # its one question is for training
