"""What a node's checkpoint holds, and putting it back: a resumed node continues exactly where
the checkpoint left it (weights, optimizer, policy version, random streams).

``node_state`` captures a running node's state for node/checkpoint/checkpoint.py to write;
``resume_latest`` loads the newest valid checkpoint of a run folder into a freshly built
policy and learner, and says in the log what a restart lost (steps recorded after the
checkpoint are redone). A checkpoint of another model, LoRA rank or base weights is refused
with a message that names the difference and the fix.
"""

from __future__ import annotations

import asyncio
import json
import logging
from pathlib import Path

from swarm_node.node.errors import CheckpointError
from swarm_node.node.checkpoint.checkpoint import load_latest
from swarm_node.node.checkpoint.checkpoint_format import CheckpointState, capture_rng, restore_rng
from swarm_node.node.config.config import NodeConfig
from swarm_node.policies.learner import Learner
from swarm_node.policies.policy import Policy

# The node's log name, as before resuming left trainer.py: log filters (and tests) select it.
log = logging.getLogger("swarm_node.node.run.trainer")

__all__ = ["node_state", "restore", "resume_latest", "mismatch", "steps_recorded"]


def node_state(cfg: NodeConfig, policy: Policy, learner: Learner, step: int) -> CheckpointState:
    """Everything a resume needs of a node at ``step``, with this run's config for the record."""
    return CheckpointState(
        step=step, policy_version=learner.version,
        model_state=policy.trained_state(),  # with LoRA, the adapter only
        optimizer_state=learner.optimizer.state_dict(), rng=capture_rng(),
        extra={"config": json.loads(cfg.to_json()),
               **({"frozen_fingerprint": policy.frozen_fingerprint()} if policy.adapter_only else {})})


def steps_recorded(run_dir: Path) -> int:
    """The last step metrics.jsonl records (0 if none): what a restart may have lost."""
    from swarm_node.node.observe.metrics import read_metrics

    recs = read_metrics(run_dir / "metrics.jsonl")
    return max((int(r.get("step", 0)) for r in recs), default=0)


def mismatch(model_state: dict, state: CheckpointState) -> str:
    """What differs between a checkpoint's tensors and the model's, in a few lines (torch's own
    message lists every key: kilobytes on one line for a LoRA/full fine-tuning mix-up)."""
    have, want = set(state.model_state), set(model_state)
    missing, unexpected = sorted(want - have), sorted(have - want)
    shapes = sorted(k for k in have & want if tuple(state.model_state[k].shape) != tuple(model_state[k].shape))

    def some(keys: list[str]) -> str:
        return ", ".join(keys[:3]) + (f", ... ({len(keys)} in all)" if len(keys) > 3 else "")

    parts = [f"{len(missing)} of the model's tensors are not in it (e.g. {some(missing)})" if missing else "",
             f"{len(unexpected)} of its tensors are not in the model (e.g. {some(unexpected)})" if unexpected else "",
             f"{len(shapes)} tensors differ in shape (e.g. {some(shapes)})" if shapes else ""]
    saved = (state.extra.get("config") or {}).get("model") or {}
    was = f" It was written with model.name {saved.get('name')!r}, lora_rank {saved.get('lora_rank')}." if saved else ""
    return ("the checkpoint does not match the model: " + "; ".join(p for p in parts if p) + "." + was
            + " Resume with the model settings it was written with, or use another --run.dir.")


def restore(policy: Policy, learner: Learner, state: CheckpointState) -> None:
    """Load ``state`` into ``policy`` and ``learner``; CheckpointError when it is another model's."""
    try:
        policy.load_trained_state(state.model_state)
    except (ValueError, RuntimeError):  # missing/unexpected keys or shapes: another model or LoRA rank
        raise CheckpointError(mismatch(policy.trained_state(), state)) from None
    base = state.extra.get("frozen_fingerprint")
    if policy.adapter_only and base is not None and base != policy.frozen_fingerprint():
        saved = (state.extra.get("config") or {}).get("model") or {}
        now_dtype = str(policy.model.dtype).removeprefix("torch.")
        if saved.get("dtype") not in (None, now_dtype):
            raise CheckpointError(f"the checkpoint holds a LoRA adapter trained on the base weights in "
                                  f"{saved['dtype']}; this run loads them in {now_dtype}: resume with "
                                  f"--model.dtype {saved['dtype']}, or use another --run.dir")
        raise CheckpointError(f"the checkpoint holds a LoRA adapter trained on other base weights than "
                              f"--model.name {policy.name!r} has (it was trained from {saved.get('name')!r}): "
                              f"resume with the model it was trained from, or use another --run.dir")
    if state.optimizer_state is not None:
        try:
            learner.optimizer.load_state_dict(state.optimizer_state)
        except (ValueError, KeyError, RuntimeError) as e:
            raise CheckpointError(f"checkpoint optimizer state does not match the model: {e}") from e
        # Saved param groups carry the old hyper-parameters; the config of this run wins.
        for group in learner.optimizer.param_groups:
            group["weight_decay"] = learner.weight_decay
    learner.version = state.policy_version
    if state.rng is not None:
        restore_rng(state.rng)


async def resume_latest(cfg: NodeConfig, policy: Policy, learner: Learner) -> int:
    """Restore the newest valid checkpoint of the run folder; the step to continue from (0 when
    there is none yet). Logs the steps metrics.jsonl records past it: lost, and trained again.
    The files are read in a worker thread (the event loop stays free for signals)."""
    run_dir = Path(cfg.run.dir)
    ckpt_root = run_dir / "checkpoints"
    found = await asyncio.to_thread(load_latest, ckpt_root)
    if found is None:
        log.info("no checkpoint in %s yet: starting from step 0", ckpt_root)
        lost = steps_recorded(run_dir)
        if lost:
            log.warning("%s records %d steps but no checkpoint was written: they are lost "
                        "and the node starts again from step 0 (run.checkpoint_every = %d)",
                        run_dir / "metrics.jsonl", lost, cfg.run.checkpoint_every)
        return 0
    state, path = found
    restore(policy, learner, state)
    lost = steps_recorded(run_dir) - state.step
    log.info("resumed from %s (step %d, policy v%d)%s", path, state.step, state.policy_version,
             f"; the {lost} steps recorded after it are redone" if lost > 0 else "")
    return state.step
