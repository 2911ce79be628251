"""node/run/signal_watch.py: a run whose groups stay all-equal is warned about once, with the cause
its own metrics point to; ``run.log_samples`` shows the completions."""

from __future__ import annotations

import logging

import pytest

from swarm_node.node.observe.status import StatusFile
from swarm_node.node.config.config import load_config
from swarm_node.node.run.rollouts import Rollout
from swarm_node.node.run.signal_watch import FLAT_STEPS, SAMPLE_CHARS, SignalWatch, is_flat, likely_cause, sample_lines
from swarm_node.policies.policy import Completion
from swarm_node.protocol.task_id import TaskId
from swarm_node.rewards.registry import make_task
from swarm_node.rewards.scoring import Reward
from tests.helpers.swarm_helpers import train_to_end

pytestmark = pytest.mark.usefixtures("one_torch_thread")


def _rollout(seed: int, text: str = "<answer>1</answer>", correct: float = 0.0, truncated: bool = False) -> Rollout:
    return Rollout(TaskId("arithmetic", seed, 1), Completion((1,), (2,), text, (-0.1,), truncated), 0,
                   Reward(correct, 0.0, well_formed=True))


def _said(caplog, level: int) -> list[str]:
    """What the watch logged at ``level`` (another test's setup may leave other loggers at INFO)."""
    return [r.getMessage() for r in caplog.records if r.levelno == level and r.name == "swarm_node.node.run.signal_watch"]


FLAT = {"zero_adv_frac": 1.0, "format": 0.0, "truncated": 0.0, "correct": 0.0}


@pytest.mark.parametrize("metrics, words", [
    ({"format": 0.0, "truncated": 0.0, "correct": 0.0}, ["format 0", "generation.system_prompt"]),
    ({"format": 0.0, "truncated": 0.9, "correct": 0.0}, ["90% of the completions were cut", "raise it", "format 0"]),
    ({"format": 1.0, "truncated": 0.0, "correct": 1.0}, ["too easy", "tasks.difficulties"]),
    ({"format": 1.0, "truncated": 0.0, "correct": 0.0}, ["too hard"]),
    ({"format": 0.5, "truncated": 0.1, "correct": 0.5}, ["generation.temperature"]),
    # Answers read leniently: no format is no cause while answers were read; none read is.
    ({"format": 0.0, "answered": 0.9, "truncated": 0.0, "correct": 0.0}, ["too hard"]),
    ({"format": 0.0, "answered": 0.0, "truncated": 0.0, "correct": 0.0}, ["answered 0", "generation.system_prompt"]),
])
def test_the_likely_cause_is_read_from_the_steps_metrics(metrics, words):
    cause = likely_cause(metrics, 64)
    assert all(w in cause for w in words), cause
    if metrics["truncated"] >= 0.5:
        assert "generation.max_completion_length (64 tokens)" in cause


def test_a_flat_step_has_no_advantage_or_only_uninformative_own_groups():
    rollouts = [_rollout(1), _rollout(1), _rollout(2), _rollout(2)]
    assert is_flat({"zero_adv_frac": 1.0}, rollouts) and not is_flat({"zero_adv_frac": 0.5}, rollouts)
    # no update (swarm.replace_uninformative dropped every own group): the own groups say it
    assert is_flat({"own_uninformative": 2}, rollouts) and not is_flat({"own_uninformative": 1}, rollouts)
    assert is_flat({}, []) is None


def test_warned_once_after_a_run_of_flat_steps_and_a_learning_step_starts_the_count_again(tmp_path, caplog):
    caplog.set_level(logging.INFO, logger="swarm_node.node.run.signal_watch")
    status = StatusFile(tmp_path, 100, "m", 0)
    watch = SignalWatch(0, 64, status)
    rollouts = [_rollout(1)]

    for _ in range(FLAT_STEPS - 1):
        watch.after_step(FLAT, rollouts)
    watch.after_step({**FLAT, "zero_adv_frac": 0.75}, rollouts)  # one group taught something
    for _ in range(FLAT_STEPS - 1):
        watch.after_step(FLAT, rollouts)
    assert not _said(caplog, logging.WARNING) and "note" not in status.extra
    watch.after_step(FLAT, rollouts)
    [warning] = _said(caplog, logging.WARNING)
    assert f"nothing to learn for {FLAT_STEPS} steps in a row" in warning and "format 0" in warning
    assert status.extra["note"].startswith("nothing to learn: no answer could be read from any completion")
    for _ in range(3 * FLAT_STEPS):
        watch.after_step(FLAT, rollouts)
    assert len(_said(caplog, logging.WARNING)) == 1  # once
    assert not _said(caplog, logging.INFO)  # run.log_samples 0: no samples


def test_samples_show_the_question_the_reward_and_the_start_of_the_completion():
    long = "x" * (SAMPLE_CHARS + 50)
    rollouts = [_rollout(1, "<answer>3</answer>", 1.0), _rollout(1), _rollout(2, long, truncated=True), _rollout(2)]
    first, second = sample_lines(rollouts, 2)  # one from each group
    assert first.startswith("sample 1/2 (arithmetic, reward 1.00): question ")
    assert repr(make_task(TaskId("arithmetic", 1, 1)).question) in first and "'<answer>3</answer>'" in first
    assert "cut at the limit" in second and "x" * SAMPLE_CHARS + f"... ({SAMPLE_CHARS + 50} chars)" in second
    assert "x" * (SAMPLE_CHARS + 1) not in second
    assert len(sample_lines(rollouts, 10)) == 4 and sample_lines(rollouts, 0) == []


def test_a_run_that_never_writes_the_format_is_warned_with_samples_to_look_at(tiny_model_dir, tmp_path, caplog):
    """The untrained tiny model never closes an answer block: every group scores 0, and the run
    says why after FLAT_STEPS steps; ``run.log_samples 2`` logs two completions a step."""
    caplog.set_level(logging.INFO, logger="swarm_node.node.run.signal_watch")
    cfg = load_config(None, {"model.name": str(tiny_model_dir), "run.dir": str(tmp_path / "run"),
                             "run.progress": "off", "run.plot": False, "generation.prompts_per_step": 2,
                             "generation.num_generations": 2, "generation.max_completion_length": 6,
                             "train.steps": FLAT_STEPS + 1, "run.checkpoint_every": 0, "eval.every": 0,
                             "eval.at_end": False, "eval.at_start": False, "run.log_samples": 2})
    train_to_end(cfg)
    warnings = _said(caplog, logging.WARNING)
    assert len(warnings) == 1 and "nothing to learn" in warnings[0] and "format 0" in warnings[0]
    samples = _said(caplog, logging.INFO)
    assert len(samples) == 2 * (FLAT_STEPS + 1) and samples[0].startswith("step 1 sample 1/2 (")
