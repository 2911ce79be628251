"""The embedded default model for real: built from scratch (tokenizer, Qwen2, warm start), cached,
loaded with from_pretrained, and trained by the CLI for a few steps. Slow: the build takes about
two minutes on 2 CPU cores."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from swarm_node.policies.default_model import ensure_default_model
from swarm_node.policies.policy import Policy, SamplingParams
from swarm_node.rewards.registry import make_task, sample_task_ids
from swarm_node.rewards.scoring import score

from tests.helpers.paths import ROOT

pytestmark = [pytest.mark.slow, pytest.mark.subprocess]


@pytest.fixture(scope="module")
def default_dir(tmp_path_factory) -> Path:
    return ensure_default_model(home=tmp_path_factory.mktemp("home"))


def test_default_model_is_small_cached_and_answers_in_format(default_dir, tmp_path_factory):
    import random

    policy = Policy.load(default_dir)
    n_params = sum(p.numel() for p in policy.model.parameters())
    assert 1e6 < n_params < 1e7  # "a few million parameters"
    assert (default_dir / "model.safetensors").exists() and (default_dir / "tokenizer.json").exists()
    # Cached: a second call returns the same folder without rebuilding.
    assert ensure_default_model(home=default_dir.parents[1]) == default_dir
    tasks = [make_task(t) for t in sample_task_ids(random.Random(0), 16, difficulties=(1, 2))]
    groups = policy.generate([t.prompt for t in tasks], 8, SamplingParams(max_new_tokens=16))
    rewards = [score(t, c.text) for t, g in zip(tasks, groups) for c in g]
    well_formed = sum(r.format > 0 for r in rewards) / len(rewards)
    correct = sum(r.correctness for r in rewards) / len(rewards)
    # The warm start teaches the format and some answers, not all: RL needs signal and room.
    assert well_formed > 0.8
    assert 0.02 < correct < 0.6


def test_cli_trains_the_default_model(default_dir, tmp_path):
    run = tmp_path / "run"
    r = subprocess.run([sys.executable, "-m", "swarm_node.node.cli", "train", "--model.name", str(default_dir),
                        "--train.steps", "3", "--run.dir", str(run), "--run.progress", "plain"],
                       cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr
    summary = json.loads(r.stdout)
    assert summary["steps"] == 3 and Path(summary["plot"]).exists()
