"""The node's round loop: sample tasks, generate, score, share and collect peers' rollouts, learn,
log, checkpoint.

``TrainingNode`` owns the policy, the learner, the metrics file and the checkpoints of one run
folder. Its asyncio loop keeps the event loop free for signals and status while each round's
compute runs in a worker thread; Ctrl-C (SIGINT) or SIGTERM stops it after the current step, with
a final checkpoint, so nothing on disk is ever half-written.

Run folder layout::

    config.json          the resolved configuration
    metrics.jsonl        one record per step
    checkpoints/         step_000050/ ... (node/run/checkpoint.py), newest valid one resumes
    reward_curve.png     written at the end
    summary.json         first/last-20-step rewards, steps, wall time
"""

from __future__ import annotations

import asyncio
import collections
import copy
import json
import logging
import random
import signal
import time
from pathlib import Path

import numpy as np
import torch

from node.clock import RoundClock
from node.run.checkpoint import CheckpointState, capture_rng, load_latest, restore_rng, save_checkpoint
from node.run.config import NodeConfig, batch_overlap
from node.daemon_thread import run_in_daemon_thread
from node.errors import CheckpointError, ConfigError
from node.observe.metrics import MetricsWriter
from node.observe.endpoint import MetricsEndpoint
from node.observe.plots import plot_reward_curve
from node.run.preflight import check_context, check_device, check_resume_matches, check_run_dir
from node.observe.progress import Progress
from node.broadcast.roles import make_role
from node.run.rollouts import external_samples, generate_rollouts, round_task_ids, to_records, to_train_samples
from node.observe.status import Phase, StatusFile
from node.swarm.exchange import PeerGroup, SwarmExchange
from node.transport import Transport
from node.transport.mqtt.url import parse_broker_url
from node.transport.from_config import transport_from_config
from protocol.identity import load_or_create_identity
from policies.errors import PolicyError
from policies.learner import Learner
from policies.loss import LossConfig
from policies.policy import Policy, SamplingParams
from rewards.scoring import RewardConfig

log = logging.getLogger(__name__)

__all__ = ["TrainingNode", "load_policy", "build_learner"]



def load_policy(cfg: NodeConfig, phase: Phase | None = None) -> Policy:
    """The configured policy; ``default`` resolves to the embedded model (built once, cached).
    ``phase`` hears which start-up phase this is in (building, loading)."""
    phase = phase or (lambda name, detail="": None)
    name = cfg.model.name
    if name == "default":
        from policies.default_model import default_home, ensure_default_model

        name = str(ensure_default_model(progress=lambda d: phase("building the embedded default model", d)))
        phase("loading the model", f"embedded default, cached in {default_home()}")
    else:
        phase("loading the model", name)
    return Policy.load(name, dtype=cfg.model.dtype, device=cfg.model.device,
                       lora_rank=cfg.model.lora_rank, lora_alpha=cfg.model.lora_alpha,
                       seed=cfg.train.seed, gradient_checkpointing=cfg.model.gradient_checkpointing)


def build_learner(policy: Policy, cfg: NodeConfig) -> Learner:
    lc = cfg.learner
    return Learner(
        policy, learning_rate=lc.learning_rate, weight_decay=lc.weight_decay,
        max_grad_norm=lc.max_grad_norm, num_iterations=lc.num_iterations, baseline=lc.baseline,
        scale_rewards=lc.scale_rewards, lr_rule=lc.lr_rule, rho_ref=lc.rho_ref,
        lr_floor=lc.lr_floor, warmup_steps=lc.warmup_steps, temperature=cfg.generation.temperature,
        off_policy_correction=lc.off_policy_correction, micro_batch_size=lc.micro_batch_size,
        loss=LossConfig(importance_sampling_level=lc.importance_sampling_level,
                        epsilon=lc.epsilon, epsilon_high=lc.epsilon_high, delta=lc.delta,
                        m2po_tau=lc.m2po_tau, weight_cap=lc.weight_cap, loss_type=lc.loss_type,
                        max_completion_length=cfg.generation.max_completion_length))


def _backend(cfg: NodeConfig) -> str:
    from policies.vllm_backend import choose_backend

    g = cfg.generation
    try:
        return choose_backend(g.backend, cfg.model.device, top_p=g.top_p, top_k=g.top_k,
                              behaviour_lag=cfg.train.behaviour_lag)
    except PolicyError as e:
        raise ConfigError(str(e)) from None


def _start_vllm(policy: Policy, cfg: NodeConfig):
    """The vLLM engine for this run (policies/vllm_backend.py), sized for its longest sequence."""
    from node.run.preflight import longest_prompt
    from policies.vllm_backend import VllmSampler

    g = cfg.generation
    length = longest_prompt(policy.encode_prompts, cfg) + g.max_completion_length + 16
    return VllmSampler(policy, model_path=policy.name, dtype=cfg.model.dtype, max_model_len=length,
                       seed=cfg.train.seed, gpu_memory_utilization=g.vllm_gpu_memory_utilization,
                       cpu_kv_cache_gib=g.vllm_cpu_kv_cache_gib, sleep=g.vllm_sleep)


def identity_path(cfg: NodeConfig) -> Path:
    return Path(cfg.swarm.identity) if cfg.swarm.identity else Path(cfg.run.dir) / "identity.pem"


async def build_exchange(cfg: NodeConfig, policy: Policy, transport: Transport | None = None,
                         phase: Phase | None = None) -> SwarmExchange:
    """This node's identity, transport and exchange, started (joins the swarm); ``phase`` hears
    about join attempts."""
    sc = cfg.swarm
    ident = load_or_create_identity(identity_path(cfg))
    log.info("peer id %s (key %s)", ident.peer_id, identity_path(cfg))
    if transport is None:
        transport = transport_from_config(sc, ident, p2p_identity_path=str(identity_path(cfg)) + ".p2p",
                                          on_retry=(lambda d: phase("joining the swarm", d)) if phase else None)
    if cfg.faults.active:
        from node.transport.faulty import FaultyTransport

        f = cfg.faults
        transport = FaultyTransport(swarm=sc.name, publisher=ident.peer_id, inner=transport,
                                    delay_seconds=f.delay_seconds, jitter_seconds=f.jitter_seconds,
                                    blocked_peers=frozenset(f.blocked_peers), blocked_from=f.blocked_from,
                                    blocked_until=f.blocked_until, seed=cfg.train.seed)
        log.warning("fault injection on: %s", f.model_dump())
    embeddings = policy.model.get_input_embeddings().num_embeddings
    tok = policy.tokenizer
    exchange = SwarmExchange(
        transport, ident, RoundClock(sc.round_seconds),
        tokenizer_fingerprint=policy.tokenizer_fingerprint,
        model_fingerprint=policy.model_fingerprint, vocab_size=min(len(tok), embeddings),
        decode_text=lambda ids: tok.decode(list(ids), skip_special_tokens=True),
        group_cap=cfg.group_size, max_round_lag=sc.max_round_lag, poll_seconds=sc.poll_seconds,
        max_clock_skew=sc.max_clock_skew, seed=cfg.train.seed, external_groups=sc.external_groups,
        max_sender_share=sc.max_sender_share, special_ids=frozenset(tok.all_special_ids), eos_id=tok.eos_token_id,
        max_tokens=cfg.generation.max_completion_length)
    await exchange.start()
    log.info("joined swarm %r over %s as %s", sc.name, type(transport).__name__, ident.peer_id)
    return exchange


def _steps_recorded(run_dir: Path) -> int:
    """The last step metrics.jsonl records (0 if none): what a restart may have lost."""
    from node.observe.metrics import read_metrics

    recs = read_metrics(run_dir / "metrics.jsonl")
    return max((int(r.get("step", 0)) for r in recs), default=0)


# What a start writes into its run folder before it is up; a failed start that created the
# folder removes them (and the folder, if nothing else is in it).
_START_FILES = ("status.json", "status.json.tmp", "config.json", "identity.pem", "identity.pem.p2p")


def _first_missing(path: Path) -> Path | None:
    """The outermost folder of ``path`` that does not exist yet (what ``mkdir(parents=True)``
    will create), or None if ``path`` exists."""
    missing = None
    while not path.exists() and path != path.parent:
        missing, path = path, path.parent
    return missing


def _remove_failed_start(run_dir: Path, created: Path) -> None:
    """Undo what a failed start wrote in the folders it created (``run_dir`` up to ``created``)."""
    for name in _START_FILES:
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


COINCIDE_STEPS = 20  # consecutive same-batch steps before the node warns (_warn_if_batches_coincide)


def _mismatch(model_state: dict, state: CheckpointState) -> str:
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


def _seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


class _LaggedBehaviour:
    """Generates with a copy of the policy ``lag`` updates old (stale-node experiments).

    Keeps the last lag+1 weight snapshots on the CPU; generation loads the oldest into a second
    model instance. With lag 0 the live policy generates and nothing is copied.
    """

    def __init__(self, policy: Policy, lag: int, version: int):
        self.lag = lag
        self.policy = policy
        self.snapshots: collections.deque = collections.deque(maxlen=lag + 1)
        self.behaviour = None
        if lag > 0:
            self.behaviour = Policy(copy.deepcopy(policy.model), policy.tokenizer, policy.name)
            self.push(version)  # after a resume the buffer restarts from the resumed weights

    def push(self, version: int) -> None:
        if self.lag > 0:
            state = {k: v.detach().to("cpu", copy=True) for k, v in self.policy.model.state_dict().items()}
            self.snapshots.append((version, state))

    def sampler(self) -> tuple[Policy, int]:
        if self.lag == 0:
            return self.policy, -1
        version, state = self.snapshots[0]
        self.behaviour.model.load_state_dict(state)
        return self.behaviour, version


class TrainingNode:
    def __init__(self, cfg: NodeConfig, policy: Policy, learner: Learner, run_dir: Path,
                 start_step: int, swarm: SwarmExchange | None = None,
                 endpoint: MetricsEndpoint | None = None, status: StatusFile | None = None,
                 vllm: "VllmSampler | None" = None):
        self.cfg = cfg
        self.policy = policy
        self.vllm = vllm  # the vLLM engine that samples, or None: the policy's own generate
        self.learner = learner
        self.run_dir = run_dir
        self.step = start_step
        self.start_step = start_step
        self.stop_requested = False
        self.lagged = _LaggedBehaviour(policy, cfg.train.behaviour_lag, learner.version)
        self.metrics = MetricsWriter(run_dir / "metrics.jsonl",
                                     resume_from_step=start_step if start_step > 0 else None)
        self.sampling = SamplingParams(max_new_tokens=cfg.generation.max_completion_length,
                                       temperature=cfg.generation.temperature,
                                       top_p=cfg.generation.top_p, top_k=cfg.generation.top_k)
        for p in (policy, self.lagged.behaviour):  # the lagged copy samples when behaviour_lag > 0
            if p is not None:
                p.generation_batch_size = cfg.generation.batch_size
        self.reward_cfg = RewardConfig(format_weight=cfg.tasks.format_weight)
        self.swarm = swarm
        self.endpoint = endpoint
        self.clock = swarm.clock if swarm is not None else None
        self.last_round: int | None = None
        self.rounds_skipped = 0
        self._closed = False
        self._coincide_warned = False
        self._gen_halvings = 0  # generation's out-of-memory halvings in the current step
        self._coincide_steps = 0  # consecutive steps in which this node took every peer group
        self.status = status or StatusFile(run_dir, cfg.train.steps, cfg.model.name, start_step)
        self.role = make_role(cfg.broadcast.role)  # node/broadcast/roles.py: full, learner or worker

    @classmethod
    async def create(cls, cfg: NodeConfig, transport: Transport | None = None) -> "TrainingNode":
        """Load the policy (building the default model if needed), resume if asked, and join the
        swarm when ``swarm.transport`` is set (``transport`` overrides the configured one).

        Everything that can be checked without loading the model is checked first (the run
        folder, the device, the checkpoint's settings). A start that fails leaves no trace in
        a run folder it created, and ``config.json`` is written only once the node is up."""
        run_dir = Path(cfg.run.dir)
        ckpt_root = run_dir / "checkpoints"
        check_run_dir(run_dir)
        if not cfg.run.resume and ckpt_root.exists() and any(ckpt_root.iterdir()):
            raise ConfigError(f"run folder {run_dir} already has checkpoints: pass --resume "
                              f"to continue it, or choose another --run.dir")
        if cfg.run.resume:
            check_resume_matches(ckpt_root, cfg.model.model_dump())
        if transport is not None and cfg.swarm.transport == "none":
            raise ConfigError("a transport was given but swarm.transport is 'none'")
        check_device(cfg.model.device)
        backend = _backend(cfg)  # before the model loads: an explicit vllm that cannot run fails now
        if cfg.train.threads:
            torch.set_num_threads(cfg.train.threads)
        created = _first_missing(run_dir.absolute())  # the outermost folder this start makes, if any
        run_dir.mkdir(parents=True, exist_ok=True)
        status = StatusFile(run_dir, cfg.train.steps, cfg.model.name)
        endpoint = swarm = vllm = None
        try:
            policy = await run_in_daemon_thread(load_policy, cfg, status.phase)
            check_context(policy, cfg)
            # Seed after loading: building the default model on first use seeds its own recipe.
            _seed_everything(cfg.train.seed)
            learner = build_learner(policy, cfg)
            if cfg.learner.baseline == "opob":
                log.warning("learner.baseline opob runs one backward pass per sample (%d a step here): measured "
                            "about 20x the learner time of mean at 32 samples, growing with the batch "
                            "(docs/results/exp_baselines.md); opob_approx costs what mean costs",
                            cfg.generation.prompts_per_step * cfg.group_size)
            start_step = 0
            if cfg.run.resume:
                status.phase("restoring the newest checkpoint", str(ckpt_root))
                found = await asyncio.to_thread(load_latest, ckpt_root)
                if found is None:
                    log.info("no checkpoint in %s yet: starting from step 0", ckpt_root)
                    lost = _steps_recorded(run_dir)
                    if lost:
                        log.warning("%s records %d steps but no checkpoint was written: they are lost "
                                    "and the node starts again from step 0 (run.checkpoint_every = %d)",
                                    run_dir / "metrics.jsonl", lost, cfg.run.checkpoint_every)
                else:
                    state, path = found
                    cls._restore(policy, learner, state)
                    start_step = state.step
                    lost = _steps_recorded(run_dir) - state.step
                    log.info("resumed from %s (step %d, policy v%d)%s", path, state.step, state.policy_version,
                             f"; the {lost} steps recorded after it are redone" if lost > 0 else "")
            status.base["step"] = start_step
            if backend == "vllm":
                status.phase("starting the vLLM engine", "generation backend (import and start-up: about a minute on a CPU)")
                vllm = await run_in_daemon_thread(_start_vllm, policy, cfg)
                vllm.sync(policy)  # the engine read the weights on disk: a resumed run has others
            if cfg.run.metrics_port is not None:
                endpoint = MetricsEndpoint(cfg.run.metrics_host, cfg.run.metrics_port)
                try:
                    endpoint.start()
                except OSError as e:
                    raise ConfigError(f"cannot serve metrics on {cfg.run.metrics_host}:{cfg.run.metrics_port}: "
                                      f"{e.strerror or e}; choose another --run.metrics_port (0 = any free port)") from e
            if cfg.swarm.transport != "none":
                how = ("starting the p2p daemon, then contacting " + ", ".join(cfg.swarm.initial_peers)
                       if cfg.swarm.transport == "hivemind" and transport is None and cfg.swarm.initial_peers
                       else "starting the libp2p host, then contacting " + ", ".join(cfg.swarm.initial_peers)
                       if cfg.swarm.transport == "libp2p" and transport is None and cfg.swarm.initial_peers
                       else "connecting to the broker at " + parse_broker_url(cfg.swarm.broker).url
                       if cfg.swarm.transport == "mqtt" and transport is None else cfg.swarm.transport)
                status.phase("joining the swarm", how)
                swarm = await build_exchange(cfg, policy, transport, status.phase)
            node = cls(cfg, policy, learner, run_dir, start_step, swarm, endpoint, status, vllm)
            if cfg.broadcast.role != "full":
                status.phase("starting the weight broadcast", f"role {cfg.broadcast.role}")
                try:
                    await node.role.start(node)
                except BaseException:
                    await node.role.close()
                    raise
            (run_dir / "config.json").write_text(cfg.to_json())
            return node
        except BaseException as e:
            if vllm is not None:
                vllm.close()
            if swarm is not None:  # joined already: leave the swarm, stop the daemon
                await swarm.close()
            if endpoint is not None:
                endpoint.close()
            if created is not None:
                status.close()  # a build still running in its thread must not write it back
                _remove_failed_start(run_dir, created)
            else:  # a folder with an earlier run: its status says this start failed, and why
                reason = "interrupted" if isinstance(e, (KeyboardInterrupt, asyncio.CancelledError)) else str(e)
                status.phase("failed to start", reason.splitlines()[0][:300] if reason else type(e).__name__)
                status.close()
            raise

    @staticmethod
    def _restore(policy: Policy, learner: Learner, state: CheckpointState) -> None:
        try:
            policy.load_trained_state(state.model_state)
        except (ValueError, RuntimeError):  # missing/unexpected keys or shapes: another model or LoRA rank
            raise CheckpointError(_mismatch(policy.trained_state(), state)) from None
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

    # -- one step ---------------------------------------------------------------------------
    def _generate(self, step: int, n_groups: int, task_seed: int | str):
        """This step's local rollouts (worker thread)."""
        cfg = self.cfg
        t0 = time.perf_counter()
        if self.policy.device.type == "cuda":  # this step's peak, generation and learner together
            torch.cuda.reset_peak_memory_stats(self.policy.device)
        task_ids = round_task_ids(task_seed, step, n_groups, cfg.tasks.families, cfg.tasks.difficulties)
        sampler, behaviour_version = self.lagged.sampler()
        if self.vllm is not None:  # holds the weights of learner.version (synced after each update)
            sampler = self.vllm
        before = sampler.generation_oom_halvings
        # The version label and the weights are read under one lock: a follower applying a new
        # version (node/broadcast/roles.py) waits for this step's generation, so the label is exact.
        with self.policy.weights_lock:
            role_version = self.role.rollout_version(self)
            version = (role_version if role_version is not None
                       else self.learner.version if behaviour_version < 0 else behaviour_version)
            rollouts = generate_rollouts(sampler, task_ids, self.group_size, self.sampling, version,
                                         self.reward_cfg)
        self._gen_halvings = sampler.generation_oom_halvings - before
        return rollouts, version, time.perf_counter() - t0

    @property
    def group_size(self) -> int:
        return self.cfg.group_size

    def _learn(self, step: int, rollouts: list, version: int, t_gen: float,
               groups: list[PeerGroup] | None = None) -> dict:
        """Score peers' groups, update the policy, and build the step's metrics (worker thread)."""
        cfg = self.cfg
        t0 = time.perf_counter()
        staleness = self.learner.version - version
        # The staleness bound: rollouts from a policy too many versions old are dropped, counted.
        local = to_train_samples(rollouts)
        samples = [s for s in local if self.learner.version - s.policy_version <= cfg.learner.max_off_policy_steps]
        dropped = len(local) - len(samples)
        ext_correct: list[float] = []
        too_long = 0
        role_info: dict = {}
        if groups:
            groups, role_info = self.role.admit_groups(self, groups)  # a learner's bound on its workers' lag
        if groups:
            ext, ext_correct, too_long = external_samples(
                groups, self.policy, self.reward_cfg, self.group_size, cfg.generation.max_completion_length)
            samples += ext
        updates = bool(samples) and self.role.learns
        stepped = False
        try:
            if self.vllm is not None and updates:
                self.vllm.sleep()  # the engine's share of the card is the learner's during the step
            learn = self.learner.step(samples) if updates else {}
            stepped = True
        finally:
            # Before the next step samples, in place; after a failed step too (never left asleep),
            # with no weights to send then unless the sleep dropped them.
            synced = self.vllm.wake(self.policy, updates and stepped) if self.vllm is not None else None
        if synced is not None:
            learn["weight_sync_s"] = synced
        self.lagged.push(self.learner.version)
        n_tok = sum(len(r.completion.completion_ids) for r in rollouts)
        record = {
            "step": step + 1,
            "time": time.time(),
            "reward": float(np.mean([r.reward.total for r in rollouts])),
            "correct": float(np.mean([r.reward.correctness for r in rollouts])),
            "format": float(np.mean([r.reward.format > 0 for r in rollouts])),
            "truncated": float(np.mean([r.completion.truncated for r in rollouts])),
            "staleness": float(staleness),
            "dropped_stale": dropped,
            "tokens_per_s": n_tok / max(t_gen, 1e-9),
            "gen_time": t_gen,
            "learn_time": time.perf_counter() - t0,
            **learn,
            "policy_version": self.learner.version,
            # Out-of-memory recovery (policies/oom.py): rows a generate call, halvings this step.
            "gen_batch": (self.lagged.behaviour or self.policy).generation_batch_size or len(rollouts),
            "gen_oom_halvings": self._gen_halvings,
        }
        if self.policy.device.type == "cuda":
            record["cuda_peak_mib"] = torch.cuda.max_memory_allocated(self.policy.device) / 2 ** 20
            # What the whole card holds now, every process's: a vLLM engine's share is in its own process.
            free, total = torch.cuda.mem_get_info(self.policy.device)
            record["cuda_device_used_mib"] = (total - free) / 2 ** 20
        if groups is not None:
            record["external_groups"] = len(groups)
            record["external_samples"] = len(samples) - (len(local) - dropped)
            record["external_correct"] = float(np.mean(ext_correct)) if ext_correct else None
            record["external_too_long"] = too_long
            record["external_by_peer"] = dict(collections.Counter(g.sender for g in groups))
        record.update(role_info)
        return record

    async def _step(self) -> dict | None:
        t0 = time.perf_counter()
        if self.swarm is None:
            rollouts, version, t_gen = await asyncio.to_thread(
                self._generate, self.step, self.cfg.local_groups, self.cfg.train.seed)
            record = await asyncio.to_thread(self._learn, self.step, rollouts, version, t_gen)
        else:
            record = await self._swarm_step()
            if record is None:
                return None
        await self.role.after_step(self, record)
        record["step_time"] = time.perf_counter() - t0
        return record

    async def _swarm_step(self) -> dict | None:
        """One SAPO step in the current round of the shared clock: generate I groups, publish
        them, collect J peer groups (until the round ends at most), learn from all of them."""
        sw, clock, scfg = self.swarm, self.clock, self.cfg.swarm
        await self.role.before_step(self)  # a worker waits for weights fresh enough to share
        if self.stop_requested and self.role.rollout_version(self) is None:
            return None  # stopped before it had any weights to generate with
        r = clock.current()
        if self.last_round is not None and r <= self.last_round:
            await clock.wait_for(self.last_round + 1)  # one step per round: wait for the next
            r = clock.current()
        # A node that fell behind joins the current round; the rounds it missed are counted.
        skipped = 0 if self.last_round is None else r - self.last_round - 1
        self.rounds_skipped += skipped
        self.last_round = r
        first = self.step == self.start_step
        if first:
            self.status.phase("generating the first rollouts")
        rollouts, version, t_gen = await asyncio.to_thread(
            self._generate, self.step, self.cfg.local_groups, f"{self.cfg.train.seed}:{sw.peer_id}")
        await sw.publish(r, version, to_records(rollouts, frozenset(self.policy.tokenizer.all_special_ids),
                                                self.policy.tokenizer.eos_token_id))
        await sw.announce(r, self.learner.version)
        j = scfg.external_groups if self.role.learns else 0  # a worker trains on nothing: takes nothing
        deadline = time.time() + scfg.collect_seconds if scfg.collect_seconds > 0 else clock.end_of(r)
        if first and j:
            until = (f"for at most {scfg.collect_seconds:g} s" if scfg.collect_seconds > 0
                     else f"at most until round {r} ends")
            self.status.phase("waiting for peers", f"{j} peer groups, {until}")
        await sw.wait_for(j, deadline)
        groups = sw.take(j, r)
        st_now = sw.status()
        # Peers: those alive now, or ever heard from (heartbeats arrive over the first rounds).
        self._warn_if_batches_coincide(len(groups), max(st_now["peers_alive"], st_now["peers_heard"]))
        record = await asyncio.to_thread(self._learn, self.step, rollouts, version, t_gen, groups)
        st = sw.status()
        record.update({
            "round": r,
            "rounds_skipped": self.rounds_skipped,
            "peers_alive": st["peers_alive"],
            "peers_heard": st["peers_heard"],
            "peers_used": st["peers_used"],
            "rollouts_out": st["rollouts_out"],
            "groups_in": st["groups_in"],
            "groups_used": st["groups_used"],
            "groups_dropped_stale": st["dropped_stale"],
            "rejected_total": st["rejected_total"],
            "rejected": st["rejected"],
            "link": st["link"],
            "link_outages": st["outages"],
        })
        return record

    def _write_status(self, record: dict) -> None:
        """status.json: the node's live state for people and tools (replaced atomically)."""
        fields = {"step": self.step, "last": record, "memory": self._memory_status()}
        if self.swarm is not None:
            fields["swarm"] = self.swarm.status()
        if self.role.name != "full":
            fields["broadcast"] = self.role.status()
        status = self.status.write(**fields)
        if self.endpoint is not None:  # the same snapshot: the endpoint and the file agree
            self.endpoint.update(status)

    def _memory_status(self) -> dict:
        """What out-of-memory recovery has done so far this run (0 = the configured sizes)."""
        sampler = self.lagged.behaviour or self.policy
        return {"micro_batch_size": self.learner.micro_batch_size,
                "generation_batch_size": sampler.generation_batch_size,
                "learner_oom_halvings": self.learner.oom_halvings,
                "generation_oom_halvings": sampler.generation_oom_halvings}

    # -- the loop ---------------------------------------------------------------------------
    def request_stop(self) -> None:
        if not self.stop_requested:
            log.warning("stop requested: finishing step %d, then checkpointing", self.step + 1)
        self.stop_requested = True

    async def run(self, handle_signals: bool = True) -> dict:
        """Train to ``train.steps``. With ``handle_signals`` (one node per process), SIGINT and
        SIGTERM stop it after the current step; a host running several nodes handles signals
        itself and calls ``request_stop`` on each."""
        loop = asyncio.get_running_loop()
        signals = (signal.SIGINT, signal.SIGTERM) if handle_signals else ()
        for sig in signals:
            try:
                loop.add_signal_handler(sig, self.request_stop)
            except (NotImplementedError, RuntimeError):  # not the main thread / not POSIX
                pass
        total = self.cfg.train.steps
        mode = self.cfg.run.progress
        if mode == "auto" and self.cfg.run.log_format == "json":
            mode = "plain"  # a live panel on stderr would break one-JSON-object-per-line
        progress = Progress(mode, total, self.step, title=f"swarm-node · {self.run_dir.name}")
        every = self.cfg.run.checkpoint_every
        saved_at = self.start_step
        t_start = time.monotonic()
        if self.step >= total:
            log.info("%s has already trained %d of %d steps: nothing to do (raise --train.steps to "
                     "continue it)", self.run_dir, self.step, total)
        self.status.phase("training" if self.swarm is None else "training (first step)")
        try:
            while self.step < total and not self.stop_requested:
                record = await self._step()
                if record is None:  # stopped while waiting (a worker without weights yet)
                    break
                self.step += 1
                self.metrics.write(record)
                # Checkpoint before the status says "step N": whoever acts on that status (the
                # simulator's kill fault, a user) then finds step N's checkpoint on disk.
                if every and self.step % every == 0 and self.step < total:
                    await asyncio.to_thread(self.checkpoint)
                    saved_at = self.step
                self.status.phase("training", write=False)  # written with the record, next line
                self._write_status(record)
                progress.update(record)
        finally:
            progress.close()
            for sig in signals:
                try:
                    loop.remove_signal_handler(sig)
                except (NotImplementedError, RuntimeError):
                    pass
        if self.step > saved_at:  # a stop right after a periodic checkpoint needs no second one
            self.status.phase("stopping" if self.step < total else "finishing", "writing the final checkpoint")
            await asyncio.to_thread(self.checkpoint)
        summary = await asyncio.to_thread(self._finish, time.monotonic() - t_start)
        self.status.phase("stopped" if self.step < total else "finished")
        return summary

    def _warn_if_batches_coincide(self, taken: int, peers: int) -> None:
        """Warn once when every node trains on every group the swarm produced (``batch_overlap``),
        step after step: peers' heartbeats arrive over the first rounds, so early steps count
        too few peers, and one step proves nothing."""
        i, j = self.cfg.local_groups, self.cfg.swarm.external_groups
        advice = (batch_overlap(peers, self.cfg.generation.prompts_per_step, j, self.cfg.swarm.max_sender_share)
                  if taken >= peers * i else None)
        self._coincide_steps = self._coincide_steps + 1 if advice else 0
        if self._coincide_warned or self._coincide_steps < COINCIDE_STEPS:
            return
        self._coincide_warned = True
        log.warning("%s", advice)
        self.status.extra["note"] = f"every node trains on every group (J = {j} >= {peers} peers x I = {i})"

    def checkpoint(self) -> Path:
        state = CheckpointState(
            step=self.step, policy_version=self.learner.version,
            model_state=self.policy.trained_state(),  # with LoRA, the adapter only
            optimizer_state=self.learner.optimizer.state_dict(), rng=capture_rng(),
            extra={"config": json.loads(self.cfg.to_json()),
                   **({"frozen_fingerprint": self.policy.frozen_fingerprint()} if self.policy.adapter_only else {})})
        path = save_checkpoint(self.run_dir / "checkpoints", state, keep_last=self.cfg.run.keep_checkpoints)
        log.info("checkpoint %s (step %d, policy v%d)", path.name, self.step, self.learner.version)
        return path

    def _finish(self, wall_s: float) -> dict:
        from node.observe.metrics import read_metrics, summary_window

        recs = read_metrics(self.run_dir / "metrics.jsonl")
        correct = [r.get("correct") or 0.0 for r in recs]
        w = summary_window(len(correct))
        summary = {
            "steps": self.step,
            "stopped_early": self.stop_requested and self.step < self.cfg.train.steps,
            "wall_s_this_session": round(wall_s, 1),
            "correct_first": float(np.mean(correct[:w])) if correct else None,
            "correct_last": float(np.mean(correct[-w:])) if correct else None,
            "window": w,
            "run_dir": str(self.run_dir),
        }
        if self.swarm is not None:
            st = self.swarm.status()
            summary["swarm"] = {k: st[k] for k in (
                "peer_id", "peers_alive", "peers_heard", "peers_used", "groups_used_by_peer", "rollouts_out",
                "groups_in", "groups_used", "dropped_stale", "rejected", "rejected_total")}
            summary["swarm"]["rounds_skipped"] = self.rounds_skipped
        if summary["correct_first"]:
            summary["improvement"] = summary["correct_last"] / summary["correct_first"]
        if self.cfg.run.plot and recs:
            summary["plot"] = str(plot_reward_curve(self.run_dir / "metrics.jsonl",
                                                    self.run_dir / "reward_curve.png"))
        (self.run_dir / "summary.json").write_text(json.dumps(summary, indent=2))
        return summary

    async def close(self) -> None:
        if not self._closed:
            self._closed = True
            try:
                if self.vllm is not None:
                    self.vllm.close()
                await self.role.close()  # before the swarm: it shares the swarm's p2p daemon
                if self.swarm is not None:
                    await self.swarm.close()
            finally:
                if self.endpoint is not None:
                    self.endpoint.close()
                self.metrics.close()
