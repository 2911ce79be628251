"""Starting a node (``TrainingNode.create``): the checks in the order that fails fastest, the
start-up phases status.json reports, and undoing a start that fails.

Everything that can be checked without loading the model is checked first (the run folder, the
device, the checkpoint's settings: node/run/preflight.py). Then the policy loads
(node/config/policy_loader.py), the learner and the resumed state are built (node/run/wiring.py,
node/checkpoint/resume.py), the vLLM engine,
metrics endpoint, swarm and weight broadcast start. A start that fails stops what it started
and leaves no trace in a run folder it created; in a folder of an earlier run, status.json says
why it failed. ``config.json`` is written only once the node is up.
"""

from __future__ import annotations

import asyncio
import logging
import random
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import torch

from swarm_node.node.daemon_thread import run_in_daemon_thread
from swarm_node.node.errors import ConfigError
from swarm_node.node.observe.endpoint import MetricsEndpoint
from swarm_node.node.observe.record_sinks import check_sinks_available
from swarm_node.node.observe.status import StatusFile
from swarm_node.node.config.config import NodeConfig
from swarm_node.node.run.preflight import check_context, check_device, check_model_source, check_resume_matches, check_run_dir
from swarm_node.node.checkpoint.resume import resume_latest
from swarm_node.node.run.run_lock import LOCK_FILE, RunLock
from swarm_node.node.run.swarm_watch import watch_swarm
from swarm_node.node.swarm.peer_cache import keep_peer_cache
from swarm_node.node.config.policy_loader import load_policy
from swarm_node.node.run.wiring import build_exchange, build_learner, generation_backend, start_vllm
from swarm_node.node.transport import Transport
from swarm_node.node.transport.carriers import CARRIERS

if TYPE_CHECKING:
    from swarm_node.node.run.trainer import TrainingNode

# The node's log name, as before start-up left trainer.py: log filters (and tests) select it.
log = logging.getLogger("swarm_node.node.run.trainer")

__all__ = ["start_node", "START_FILES"]

# What a start writes into its run folder before it is up; a failed start that created the
# folder removes them (and the folder, if nothing else is in it).
START_FILES = ("status.json", "status.json.tmp", "config.json", "identity.pem", "identity.pem.p2p", LOCK_FILE)


def first_missing(path: Path) -> Path | None:
    """The outermost folder of ``path`` that does not exist yet (what ``mkdir(parents=True)``
    will create), or None if ``path`` exists."""
    missing = None
    while not path.exists() and path != path.parent:
        missing, path = path, path.parent
    return missing


def remove_failed_start(run_dir: Path, created: Path) -> None:
    """Undo what a failed start wrote in the folders it created (``run_dir`` up to ``created``)."""
    for name in START_FILES:
        (run_dir / name).unlink(missing_ok=True)
    d = run_dir.absolute()
    while True:
        try:
            d.rmdir()
        except OSError:
            log.info("left %s in place: it holds files this start did not write", d)
            return
        if d == created or d == d.parent:
            return
        d = d.parent


def seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


def _check_before_loading(cfg: NodeConfig, transport: Transport | None) -> str:
    """The checks that need no model, cheapest first (the folder itself was checked and locked
    before: start_node); the generation backend they settle."""
    run_dir = Path(cfg.run.dir)
    ckpt_root = run_dir / "checkpoints"
    if not cfg.run.resume and ckpt_root.exists() and any(ckpt_root.iterdir()):
        raise ConfigError(f"run folder {run_dir} already has checkpoints: pass --resume "
                          f"to continue it, or choose another --run.dir")
    if cfg.run.resume:
        check_resume_matches(ckpt_root, cfg.model.model_dump())
    if transport is not None and cfg.swarm.transport == "none":
        raise ConfigError("a transport was given but swarm.transport is 'none'")
    check_device(cfg.model.device)
    if cfg.train.max_async > 0 and cfg.generation.device:
        check_device(cfg.generation.device, "--generation.device")
    check_sinks_available(cfg.run.tensorboard, cfg.run.wandb)  # a package missing: one pip install, say it first
    check_model_source(cfg.model.name)
    return generation_backend(cfg)  # before the model loads: an explicit vllm that cannot run fails now


def _joining(cfg: NodeConfig, transport: Transport | None) -> str:
    """What "joining the swarm" does first, for status.json."""
    sc = cfg.swarm
    c = CARRIERS.get(sc.transport)  # None: "none", training alone
    if c is not None and transport is None:
        if c.joins_through_bootstrap and sc.initial_peers:
            return f"starting {c.local_peer}, then contacting " + ", ".join(sc.initial_peers)
        if c.needs_broker:
            return "connecting to the broker at " + c.broker_shown(sc.broker)
    return sc.transport


async def start_node(node_cls: type["TrainingNode"], cfg: NodeConfig,
                     transport: Transport | None = None) -> "TrainingNode":
    """Load the policy (building the default model if needed), resume if asked, and join the
    swarm when ``swarm.transport`` is set (``transport`` overrides the configured one)."""
    run_dir = Path(cfg.run.dir)
    check_run_dir(run_dir)
    created = first_missing(run_dir.absolute())  # the outermost folder this start makes, if any
    run_dir.mkdir(parents=True, exist_ok=True)
    try:  # first: a folder another node is using is not this start's to check, or to write in
        lock = RunLock.acquire(run_dir)
    except BaseException:
        if created is not None:
            remove_failed_start(run_dir, created)
        raise
    try:
        backend = _check_before_loading(cfg, transport)
    except BaseException:
        lock.release()
        if created is not None:
            remove_failed_start(run_dir, created)
        raise
    if cfg.train.threads:
        torch.set_num_threads(cfg.train.threads)
    status = StatusFile(run_dir, cfg.train.steps, cfg.model.name)
    endpoint = swarm = vllm = None
    try:
        policy = await run_in_daemon_thread(load_policy, cfg, status.phase)
        check_context(policy, cfg)
        # Seed after loading: building the default model on first use seeds its own recipe.
        seed_everything(cfg.train.seed)
        learner = build_learner(policy, cfg)
        if cfg.learner.baseline == "opob":
            log.warning("learner.baseline opob runs one backward pass per sample (%d a step here): measured "
                        "about 20x the learner time of mean at 32 samples, growing with the batch "
                        "(docs/results/exp_baselines.md); opob_approx costs what mean costs",
                        cfg.generation.prompts_per_step * cfg.group_size)
        start_step = 0
        if cfg.run.resume:
            status.phase("restoring the newest checkpoint", str(run_dir / "checkpoints"))
            start_step = await resume_latest(cfg, policy, learner)
        status.base["step"] = start_step
        if backend == "vllm":
            status.phase("starting the vLLM engine", "generation backend (import and start-up: about a minute on a CPU)")
            vllm = await run_in_daemon_thread(start_vllm, policy, cfg)
            vllm.sync(policy)  # the engine read the weights on disk: a resumed run has others
        if cfg.run.metrics_port is not None:
            endpoint = MetricsEndpoint(cfg.run.metrics_host, cfg.run.metrics_port)
            try:
                endpoint.start()
            except OSError as e:
                raise ConfigError(f"cannot serve metrics on {cfg.run.metrics_host}:{cfg.run.metrics_port}: "
                                  f"{e.strerror or e}; choose another --run.metrics_port (0 = any free port)") from e
        if cfg.swarm.transport != "none":
            status.phase("joining the swarm", _joining(cfg, transport))
            swarm = await build_exchange(cfg, policy, transport, status.phase)
        node = node_cls(cfg, policy, learner, run_dir, start_step, swarm, endpoint, status, vllm)
        node.run_lock = lock  # released by node.close()
        if cfg.broadcast.role != "full":
            status.phase("starting the weight broadcast", f"role {cfg.broadcast.role}")
            try:
                await node.role.start(node.role_ctx)
            except BaseException:
                await node.role.close()
                raise
        if swarm is not None:  # says so when it hears no peer of its swarm, or no learner it follows
            c = CARRIERS.get(cfg.swarm.transport)
            node.swarm_watch = asyncio.ensure_future(watch_swarm(cfg, swarm, status, node.role.status,
                                                                 c is not None and c.in_process))
            node.peer_cache_task = asyncio.ensure_future(
                keep_peer_cache(swarm, swarm.peer_cache, cfg.swarm.round_seconds))
        (run_dir / "config.json").write_text(cfg.to_json())
        return node
    except BaseException as e:
        lock.release()
        if vllm is not None:
            vllm.close()
        if swarm is not None:  # joined already: leave the swarm, stop the daemon
            await swarm.close()
        if endpoint is not None:
            endpoint.close()
        if created is not None:
            status.close()  # a build still running in its thread must not write it back
            remove_failed_start(run_dir, created)
        else:  # a folder with an earlier run: its status says this start failed, and why
            reason = "interrupted" if isinstance(e, (KeyboardInterrupt, asyncio.CancelledError)) else str(e)
            status.phase("failed to start", reason.splitlines()[0][:300] if reason else type(e).__name__)
            status.close()
        raise
