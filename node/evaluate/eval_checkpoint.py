"""Held-out evaluation of a saved checkpoint, after the fact (``swarm-node eval RUN``): the run's
config and checkpoint found with errors that say what is wrong, the weights loaded into a fresh
policy, the evaluation of node/evaluate/evaluate.py run, and its result written to
``RUN/eval/step_N.json``.

The evaluation is the one the node itself runs after that step (same task ids, same settings
unless overridden, same random seed), so on the same device it reproduces the ``eval`` a run
recorded in metrics.jsonl at a checkpointed step.
"""

from __future__ import annotations

import dataclasses

import json
import logging
from pathlib import Path
from typing import Any

from swarm_node.node.errors import CheckpointError, ConfigError
from swarm_node.node.observe.held_out import eval_file
from swarm_node.node.checkpoint.checkpoint import checkpoint_step, list_checkpoints, load_checkpoint, newest_valid
from swarm_node.node.config.config import NodeConfig, config_from_data
from swarm_node.node.evaluate.evaluate import eval_settings, evaluate
from swarm_node.node.checkpoint.resume import mismatch
from swarm_node.node.config.policy_loader import load_policy

log = logging.getLogger("swarm_node.node.run.eval_checkpoint")  # the log name before the split

__all__ = ["run_config", "find_checkpoint", "policy_at", "evaluate_checkpoint"]


def run_config(run_dir: Path, overrides: dict[str, Any] | None = None) -> NodeConfig:
    """The config a run folder was trained with (its config.json), with ``overrides``; a
    ``ConfigError`` that says why when ``run_dir`` is not a run folder."""
    run_dir = Path(run_dir)
    if not run_dir.is_dir():
        raise ConfigError(f"no such run folder: {run_dir}" if not run_dir.exists()
                          else f"{run_dir} is a file: pass a run folder (the --run.dir of a train or join run)")
    path = run_dir / "config.json"
    if not path.is_file():
        hint = (f" it is a simulation's folder: pass one node's, e.g. {run_dir / 'node0'}"
                if (run_dir / "sim.json").exists() else
                " pass the --run.dir of a train or join run (a node writes config.json once it has started)")
        raise ConfigError(f"{run_dir} is not a run folder: it has no config.json;{hint}")
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError) as e:
        raise ConfigError(f"{path} is unreadable ({e}): cannot tell how the run was configured") from None
    if not isinstance(data, dict):
        raise ConfigError(f"{path} is not a config (a JSON object of sections)")
    return config_from_data(data, overrides, str(path))


def find_checkpoint(run_dir: Path, step: int | None = None) -> Path:
    """The checkpoint to evaluate: the one of ``step``, or the newest valid one."""
    root = Path(run_dir) / "checkpoints"
    if step is None:
        path = newest_valid(root)
        if path is None:
            raise ConfigError(f"{run_dir} has no checkpoint to evaluate (in {root}): a run writes one every "
                              f"run.checkpoint_every steps and when it ends")
        return path
    complete = {checkpoint_step(p): p for p in list_checkpoints(root)}
    if step not in complete:
        have = sorted(complete)
        raise ConfigError(f"{run_dir} has no checkpoint of step {step}: "
                          + (f"it has steps {', '.join(map(str, have))}" if have else "it has none")
                          + " (a run writes one every run.checkpoint_every steps and at its end, and keeps the "
                            "newest run.keep_checkpoints)")
    return complete[step]


def policy_at(cfg: NodeConfig, path: Path):
    """(the policy ``cfg`` names with the checkpoint at ``path`` loaded into it, the checkpoint's
    state); a ``CheckpointError`` with the reason for a damaged checkpoint or another model's."""
    import torch

    if cfg.train.threads:
        torch.set_num_threads(cfg.train.threads)
    state = load_checkpoint(path)
    policy = load_policy(cfg)
    try:
        policy.load_trained_state(state.model_state)
    except (ValueError, RuntimeError):  # another model or LoRA rank than config.json names
        raise CheckpointError(mismatch(policy.trained_state(), state)) from None
    return policy, state


def evaluate_checkpoint(run_dir: Path, cfg: NodeConfig, path: Path) -> dict:
    """Evaluate the checkpoint at ``path`` with ``cfg``'s model and ``[eval]`` settings; write and
    return ``{"run_dir", "step", "policy_version", "checkpoint", "settings", **result}``; a
    ``ConfigError`` when no family has a held-out question (each is named in a warning)."""
    settings = eval_settings(cfg, prompt_kind=None)  # the model is loaded only if there is something to do
    if not settings.task_ids:
        raise ConfigError(f"nothing to evaluate in {run_dir}: no task family has held-out questions "
                          f"(the warnings above say why)")
    policy, state = policy_at(cfg, path)
    # Where answers are read follows the prompt format, known once the model (its template) is.
    settings = dataclasses.replace(settings, reward=cfg.tasks.reward_config(policy.prompt_format.kind))
    log.info("evaluating %s (step %d, policy v%d) on %d held-out tasks", path, state.step, state.policy_version,
             len(settings.task_ids))
    result = evaluate(policy, settings, f"{cfg.train.seed}:{state.step}")
    out = {"run_dir": str(run_dir), "step": state.step, "policy_version": state.policy_version,
           "checkpoint": str(path), "settings": cfg.eval.model_dump(), **result}
    written = eval_file(run_dir, state.step)
    written.parent.mkdir(exist_ok=True)
    written.write_text(json.dumps(out, indent=2))
    return out
