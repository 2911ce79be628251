"""The solo round loop with generation ahead of learning (train.max_async) and partial rollouts
(generation.over_provision): staleness as promised, finite steps, a stop and resume, and the
settings that cannot go together refused with the reason."""

from __future__ import annotations

import math

import pytest

from swarm_node.node.errors import ConfigError
from swarm_node.node.observe.metrics import read_metrics
from swarm_node.node.config.config import load_config
from tests.helpers.swarm_helpers import train_to_end
from tests.node.run.test_trainer import _cfg

pytestmark = pytest.mark.usefixtures("one_torch_thread")  # tests/conftest.py


def _steps(run_dir):
    return [r for r in read_metrics(run_dir / "metrics.jsonl") if "step" in r]


def test_overlap_trains_on_rollouts_one_version_behind(warm_tiny_model_dir, tmp_path):
    train_to_end(_cfg(warm_tiny_model_dir, tmp_path / "run", **{"train.max_async": 1}))
    recs = _steps(tmp_path / "run")
    assert [r["step"] for r in recs] == [1, 2, 3, 4, 5, 6]
    # Step 1's rollouts were generated before any update; every later step's during the one before.
    assert [r["staleness"] for r in recs] == [0, 1, 1, 1, 1, 1]
    assert recs[-1]["policy_version"] == 6 and all(math.isfinite(r["loss"]) for r in recs)
    assert all(r["gen_wait"] <= r["gen_time"] + 0.05 for r in recs[1:])  # never waits longer than it generates


def test_overlap_and_partial_rollouts_together(warm_tiny_model_dir, tmp_path):
    cfg = _cfg(warm_tiny_model_dir, tmp_path / "run", **{
        "train.max_async": 1, "generation.over_provision": 1.0, "generation.max_completion_length": 24,
        "generation.temperature": 1.5, "train.steps": 8})
    train_to_end(cfg)
    recs = _steps(tmp_path / "run")
    assert len(recs) == 8 and all(math.isfinite(r["loss"]) for r in recs)
    assert all(r["april_finished"] == cfg.local_groups for r in recs)  # the step's need, every step
    assert all(r["april_carried"] <= 4 for r in recs)  # in play: ceil(4 x 2) = 8, less the 4 returned
    assert sum(r["april_halted"] for r in recs) > 0 and sum(r["april_mixed_versions"] for r in recs) > 0
    # A carried completion is labelled with its oldest token's version: a step's batch is as stale
    # as one step ahead, plus the age of its oldest group.
    assert all(r["staleness"] <= 1 + r["april_oldest_group_age"] for r in recs)
    assert max(r["april_oldest_group_age"] for r in recs) >= 1 and recs[-1]["dropped_stale"] == 0


def test_a_stopped_overlapped_run_resumes_from_its_checkpoint(warm_tiny_model_dir, tmp_path):
    run = tmp_path / "run"
    train_to_end(_cfg(warm_tiny_model_dir, run, **{"train.max_async": 1, "generation.over_provision": 0.5,
                                                      "train.steps": 3}))
    train_to_end(_cfg(warm_tiny_model_dir, run, **{"train.max_async": 1, "generation.over_provision": 0.5,
                                                      "train.steps": 6, "run.resume": True}))
    recs = _steps(run)
    assert [r["step"] for r in recs] == [1, 2, 3, 4, 5, 6] and recs[-1]["policy_version"] == 6
    # The resumed run starts from step 3's weights with nothing generated ahead or carried.
    assert recs[3]["staleness"] == 0 and recs[3]["april_continued"] == 0


@pytest.mark.parametrize("over,words", [
    ({"train.max_async": 1, "train.behaviour_lag": 2}, "use one"),
    ({"train.max_async": 1, "swarm.transport": "hivemind", "broadcast.role": "worker",
      "broadcast.follow": "sn1" + "a" * 32}, "a worker does not learn"),
])
def test_settings_that_cannot_overlap_are_refused_with_the_reason(over, words):
    with pytest.raises(ConfigError, match=words):
        load_config(None, over)


def test_a_generation_device_this_machine_lacks_is_refused_before_the_model_loads(warm_tiny_model_dir, tmp_path):
    import asyncio

    from swarm_node.node.run.trainer import TrainingNode

    cfg = _cfg(warm_tiny_model_dir, tmp_path / "run", **{"train.max_async": 1, "generation.device": "cuda:7"})
    with pytest.raises(ConfigError, match="--generation.device cuda:7"):
        asyncio.run(TrainingNode.create(cfg))
    assert not (tmp_path / "run" / "config.json").exists()
