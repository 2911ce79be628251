"""What a node and the simulator tell the user before and around the first step: the start-up
phase in status.json, a warning when every node would train on the same batch, the simulator's
warnings and refusals about an earlier run, one build of the default model for many starters."""

from __future__ import annotations

import asyncio
import json
import logging
import threading
from dataclasses import replace
from pathlib import Path

import pytest

from conftest import TINY_RECIPE
from swarm_node.node.errors import ConfigError
from swarm_node.node.sim.faults import SimFaults
from swarm_node.node.sim.spec import SimSpec
from swarm_node.node.sim.preflight import check_prior_run, startup_warnings
from swarm_node.node.transport.memory import MemoryHub
from tests.helpers.swarm_helpers import create_node, run_all, swarm_cfg


def _status(node) -> dict:
    return json.loads((Path(node.run_dir) / "status.json").read_text())


def test_a_node_waiting_for_peers_says_so_in_its_status(warm_tiny_model_dir, tmp_path):
    async def scenario():
        cfg = swarm_cfg(warm_tiny_model_dir, tmp_path / "alone", **{"train.steps": 1, "swarm.round_seconds": 30.0,
                                                                     "swarm.collect_seconds": 3.0})
        node = await create_node(cfg, MemoryHub())
        assert _status(node)["phase"] == "joining the swarm"  # the last phase create() went through
        task = asyncio.ensure_future(run_all([node]))
        seen = []
        deadline = asyncio.get_running_loop().time() + 120
        while asyncio.get_running_loop().time() < deadline:
            st = _status(node)
            seen.append(st["phase"])
            if st["phase"] == "waiting for peers":
                break
            await asyncio.sleep(0.02)
        assert st["phase"] == "waiting for peers" and st["step"] == 0, seen
        assert st["phase_detail"] == "2 peer groups, for at most 3 s" and st["phase_since"] <= st["updated_at"]
        await task
        return _status(node)

    final = asyncio.run(scenario())
    assert final["phase"] == "finished" and final["step"] == 1


@pytest.mark.parametrize("nodes, warned", [(2, True), (3, False)])
def test_a_swarm_where_every_node_trains_on_every_group_is_warned_about(warm_tiny_model_dir, tmp_path, caplog,
                                                                        monkeypatch, nodes, warned):
    # I = J = 2: with one peer, each node's batch is its own 2 groups plus all of the peer's 2 (the
    # one peer may supply all of J: max_sender_share 1, as a swarm of two is told to set).
    async def scenario():
        hub = MemoryHub()
        ns = [await create_node(swarm_cfg(warm_tiny_model_dir, tmp_path / f"n{i}",
                                          **{"train.seed": i, "train.steps": 8, "swarm.max_sender_share": 1.0}), hub)
              for i in range(nodes)]
        await run_all(ns)
        return ns

    import swarm_node.node.run.trainer as trainer

    monkeypatch.setattr(trainer, "COINCIDE_STEPS", 2)  # 20 in a real run (tested below)
    caplog.set_level(logging.WARNING, logger="swarm_node.node.run.trainer")
    ns = asyncio.run(scenario())
    hits = [r for r in caplog.records if "every node trains on every group" in r.getMessage()]
    if warned:
        assert len(hits) == nodes  # once per node, not once per step
        assert "--swarm.external_groups 1 or fewer" in hits[0].getMessage()
        assert _status(ns[0])["note"] == "every node trains on every group (J = 2 >= 1 peers x I = 2)"
    else:
        assert hits == [] and "note" not in _status(ns[0])


def test_the_simulator_warns_before_it_starts():
    from swarm_node.node.config.config import load_config

    faults = SimFaults.model_validate({"kill": [{"node": 0, "at_step": 6}, {"node": 1, "at_step": 60}]})
    spec = SimSpec(nodes=2, transport="hivemind", run_dir=Path("/r"), faults=faults)
    # I = J = 4, checkpoint_every 50; one sender may supply ⌈4 x 0.5⌉ = 2 of its 4 groups a step
    cfgs = [load_config(None, {"swarm.transport": "hivemind"})] * 2
    w = startup_warnings(spec, cfgs)
    assert len(w) == 1
    assert w[0].startswith("[[kill]] node0 at step 6: its first checkpoint is at step 50") \
        and "restarts from step 0 and redoes 6 steps" in w[0] and "--run.checkpoint_every 6 or less" in w[0]
    whole = [load_config(None, {"swarm.transport": "hivemind", "swarm.max_sender_share": 1})] * 2
    w = startup_warnings(spec, whole)
    assert len(w) == 2 and w[1].startswith("with 2 nodes, every node trains on every group") \
        and "--swarm.external_groups 3 or fewer" in w[1]
    four = [load_config(None, {"swarm.transport": "hivemind", "run.checkpoint_every": 6})] * 4
    assert startup_warnings(SimSpec(nodes=4, transport="hivemind", run_dir=Path("/r"), faults=faults), four) == []
    never = [load_config(None, {"swarm.transport": "hivemind", "run.checkpoint_every": 0,
                                "swarm.external_groups": 1})] * 2
    assert "first checkpoint is at the end" in startup_warnings(spec, never)[0]


def test_the_simulator_warns_once_when_the_default_model_may_have_been_taught_its_held_out_questions():
    from swarm_node.node.config.config import load_config
    from swarm_node.policies.default_model import DefaultModelRecipe

    spec = SimSpec(nodes=3, transport="memory", run_dir=Path("/r"), control=1)
    many = DefaultModelRecipe().held_out_tasks + 1
    cfgs = [load_config(None, {"tasks.families": ["counting"], "tasks.difficulties": [2],
                               "eval.tasks_per_family": many})] * 3
    (w,) = startup_warnings(spec, cfgs)  # once, not once per node
    assert f"eval.tasks_per_family {many} is more than" in w
    # No evaluation, another model, or as many as the warm start left out: nothing to say.
    off = [c.model_copy(update={"eval": c.eval.model_copy(update={"every": 0, "at_end": False})}) for c in cfgs]
    other = [c.model_copy(update={"model": c.model.model_copy(update={"name": "/some/model"})}) for c in cfgs]
    fine = [load_config(None, {"tasks.families": ["counting"], "tasks.difficulties": [2],
                               "eval.tasks_per_family": many - 1})] * 3
    assert startup_warnings(spec, off) == startup_warnings(spec, other) == startup_warnings(spec, fine) == []


def test_batch_overlap_advice_by_hand():
    from swarm_node.node.config.config import batch_overlap

    # P peers x I = B - J groups: overlap when J >= P * I; the advice is the largest J below it
    # (a share of 1.0: one sender may supply all of J).
    assert batch_overlap(1, 8, 4, 1.0) is not None and "--swarm.external_groups 3 or fewer" in batch_overlap(1, 8, 4, 1.0)
    assert batch_overlap(1, 8, 3, 1.0) is None  # I = 5 > 3: the node takes 3 of its peer's 5
    assert batch_overlap(3, 8, 4, 1.0) is None  # 3 x 4 = 12 groups to choose 4 from
    # One sender may supply ⌈4 x 0.5⌉ = 2 of its 4 groups a step: the batches differ.
    assert batch_overlap(1, 8, 4, max_sender_share=0.5) is None
    assert batch_overlap(1, 8, 4, max_sender_share=1.0) is not None
    assert "--swarm.external_groups 5 or fewer" in batch_overlap(2, 8, 6, 1.0)  # I = 2, 2 x 2 <= 6
    assert batch_overlap(0, 8, 4, 1.0) is None and batch_overlap(1, 8, 0, 1.0) is None
    assert "raise generation.prompts_per_step" in batch_overlap(1, 2, 1, 1.0)  # J = 1 = I: no J fits


def _fake_checkpoint(node_dir: Path, step: int) -> Path:
    import torch

    from swarm_node.node.checkpoint.checkpoint import save_checkpoint
    from swarm_node.node.checkpoint.checkpoint_format import CheckpointState

    return save_checkpoint(node_dir / "checkpoints", CheckpointState(step, step, {"w": torch.zeros(2)}))


def test_the_simulator_reads_an_earlier_run_before_starting_anything(tmp_path):
    spec = SimSpec(nodes=2, transport="memory", run_dir=tmp_path)
    assert check_prior_run(spec, [10, 10], resume=False) is None  # an empty folder
    _fake_checkpoint(tmp_path / "node0", 10)
    with pytest.raises(ConfigError, match=r"already holds a run with checkpoints \(node0 \(step 10\)\): pass --resume"):
        check_prior_run(spec, [10, 10], resume=False)
    assert check_prior_run(spec, [10, 10], resume=True) is None  # node1 still has its steps to do
    _fake_checkpoint(tmp_path / "node1", 10)
    done = check_prior_run(spec, [10, 10], resume=True)
    assert "every node has already trained its 10 steps" in done and "--train.steps 20" in done
    assert check_prior_run(spec, [10, 20], resume=True) is None  # more steps: it continues
    # A corrupt newest checkpoint does not count: node1 would resume from step 10 and train on.
    bad = _fake_checkpoint(tmp_path / "node1", 20)
    (bad / "model.safetensors").write_bytes(b"garbage")
    assert check_prior_run(spec, [10, 20], resume=True) is None


def test_a_resume_that_finds_no_checkpoint_says_the_recorded_steps_are_lost(tiny_model_dir, tmp_path, caplog):
    from swarm_node.node.config.config import load_config
    from swarm_node.node.run.trainer import TrainingNode

    run = tmp_path / "r"
    run.mkdir()
    (run / "metrics.jsonl").write_text("".join(json.dumps({"step": s}) + "\n" for s in (1, 2, 3)))
    cfg = load_config(None, {"model.name": str(tiny_model_dir), "run.dir": str(run), "run.resume": True,
                             "run.checkpoint_every": 50, "train.steps": 1})
    caplog.set_level(logging.WARNING, logger="swarm_node.node.run.trainer")

    async def scenario():
        node = await TrainingNode.create(cfg)
        await node.close()
        return node.step

    assert asyncio.run(scenario()) == 0
    msg = " ".join(r.getMessage() for r in caplog.records)
    assert "records 3 steps but no checkpoint was written" in msg and "run.checkpoint_every = 50" in msg


def test_a_resume_says_how_many_recorded_steps_are_redone(tiny_model_dir, tmp_path, caplog):
    from swarm_node.node.config.config import load_config
    from swarm_node.node.run.trainer import TrainingNode

    run = tmp_path / "r"
    over = {"model.name": str(tiny_model_dir), "run.dir": str(run), "train.steps": 2, "run.progress": "off",
            "run.plot": False, "generation.prompts_per_step": 2, "generation.num_generations": 2}

    async def train(**more):
        node = await TrainingNode.create(load_config(None, {**over, **more}))
        try:
            await node.run(handle_signals=False)
        finally:
            await node.close()

    asyncio.run(train())  # checkpoint at step 2
    with (run / "metrics.jsonl").open("a") as f:  # as if steps 3-5 ran, then a kill -9
        f.write("".join(json.dumps({"step": s}) + "\n" for s in (3, 4, 5)))
    caplog.set_level(logging.INFO, logger="swarm_node.node.run.trainer")
    asyncio.run(train(**{"run.resume": True}))
    assert any("(step 2, policy v2); the 3 steps recorded after it are redone" in r.getMessage()
               for r in caplog.records)


def test_load_logs_what_trains_and_opob_warns_about_its_cost(tiny_model_dir, tmp_path, caplog):
    from swarm_node.node.config.config import load_config
    from swarm_node.node.run.trainer import TrainingNode

    caplog.set_level(logging.INFO)

    async def start(run: str, **more):
        node = await TrainingNode.create(load_config(None, {"model.name": str(tiny_model_dir),
                                                            "run.dir": str(tmp_path / run), **more}))
        await node.close()

    asyncio.run(start("lora", **{"model.lora_rank": 4}))
    asyncio.run(start("full", **{"learner.baseline": "opob"}))
    text = [r.getMessage() for r in caplog.records]
    lora = next(m for m in text if m.startswith("LoRA is on (rank 4, alpha 16, every linear layer): "))
    trained, total = (int(x.replace(",", "")) for x in lora.split(": ")[1].split(" parameters")[0].split(" of "))
    assert 0 < trained < total
    assert any(m.startswith("full fine-tuning: all ") for m in text)
    assert any("learner.baseline opob runs one backward pass per sample (64 a step here)" in m for m in text)



def test_processes_that_start_at_once_build_the_default_model_once(tmp_path):
    from swarm_node.policies.default_model import ensure_default_model

    recipe = replace(TINY_RECIPE, seed=4321)  # a recipe no other test caches
    news: dict[str, list[str]] = {"a": [], "b": []}
    building, b_waits = threading.Event(), threading.Event()
    paths = {}

    def start(name: str) -> None:
        def progress(line: str) -> None:
            news[name].append(line)
            if name == "b":
                b_waits.set()
            elif not building.is_set():  # a holds the lock: keep it until b is seen waiting for it
                building.set()
                assert b_waits.wait(60)
        paths[name] = ensure_default_model(recipe, home=tmp_path, progress=progress)

    a = threading.Thread(target=start, args=("a",))
    a.start()
    assert building.wait(60)
    b = threading.Thread(target=start, args=("b",))
    b.start()
    a.join(120)
    b.join(120)
    assert paths["a"] == paths["b"] and (paths["a"] / "BUILD_OK").exists()
    assert news["a"][0] == "training the tokenizer" and news["a"][-1] == "saving"
    assert news["b"] == ["waiting for another process that is building it"]  # it did not build again
    assert [p.name for p in (tmp_path / "models").iterdir() if ".tmp-" in p.name] == []


def test_the_same_batch_warning_needs_consecutive_steps(caplog):
    # A 4-node swarm's first steps see one peer's heartbeat only: that must not warn.
    from types import SimpleNamespace

    from swarm_node.node.config.config import load_config
    from swarm_node.node.run.trainer import COINCIDE_STEPS, TrainingNode

    cfg = load_config(None, {"swarm.transport": "memory", "swarm.max_sender_share": 1})  # I = J = 4
    node = SimpleNamespace(cfg=cfg, _coincide_warned=False, _coincide_steps=0,
                           status=SimpleNamespace(extra={}))
    warn = TrainingNode._warn_if_batches_coincide
    caplog.set_level(logging.WARNING, logger="swarm_node.node.run.trainer")
    for _ in range(3):
        warn(node, 4, 1)  # looks like two nodes for a few steps...
    warn(node, 4, 3)  # ...then the other peers' heartbeats arrive
    for _ in range(COINCIDE_STEPS - 1):
        warn(node, 4, 1)
    assert not caplog.records and "note" not in node.status.extra
    warn(node, 4, 1)  # the 20th consecutive step
    assert len(caplog.records) == 1 and "every node trains on every group" in caplog.records[0].getMessage()


def test_the_simulator_warns_before_resuming_a_node_on_another_recipe(warm_tiny_model_dir, tmp_path):
    """An old run folder (``runs/demo`` before the demo changed): a node whose checkpoint was trained
    on other tasks, another evaluation or in the other role is named before the run starts."""
    from swarm_node.node.config.config import config_from_data
    from tests.helpers.swarm_helpers import train_to_end

    cfg = swarm_cfg(warm_tiny_model_dir, tmp_path / "sim" / "node0", **{"train.steps": 1, "swarm.transport": "none"})
    train_to_end(cfg)  # a checkpoint at its end, and config.json
    spec = SimSpec(nodes=1, transport="memory", run_dir=tmp_path / "sim")
    same = config_from_data(json.loads((tmp_path / "sim" / "node0" / "config.json").read_text()), None, "saved")
    assert startup_warnings(spec, [same]) == []  # the saved config read back: nothing changed
    other = same.model_copy(update={"tasks": same.tasks.model_copy(update={"families": ["counting"]})})
    (w,) = startup_warnings(spec, [other])
    assert w.startswith("node0 resumes a checkpoint trained with another tasks than this run asks for")
    sharing = same.model_copy(update={"swarm": same.swarm.model_copy(update={"transport": "memory"})})
    assert "role (sharing or control)" in startup_warnings(spec, [sharing])[0]
