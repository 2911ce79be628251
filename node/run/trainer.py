"""The node's round loop: sample tasks, generate, score, share and collect peers' rollouts, learn,
log, checkpoint.

``TrainingNode`` owns the policy, the learner, the metrics file and the checkpoints of one run
folder. Its asyncio loop keeps the event loop free for signals and status while each round's
compute runs in a worker thread; Ctrl-C (SIGINT) or SIGTERM stops it after the current step, with
a final checkpoint, so nothing on disk is ever half-written. How a node is built and started is
node/run/startup.py's job (``TrainingNode.create``), from the policy node/config/policy_loader.py
loads and the parts node/run/wiring.py builds.

Run folder layout::

    config.json          the resolved configuration
    metrics.jsonl        one record per step
    checkpoints/         step_000050/ ... (node/checkpoint/checkpoint.py), newest valid one resumes
    reward_curve.png     written at the end
    summary.json         first/last-20-step rewards, steps, wall time (node/run/summary.py)
"""

from __future__ import annotations

import asyncio
import collections
import logging
import time
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import torch

from swarm_node.node.observe.endpoint import MetricsEndpoint
from swarm_node.node.observe.record_sinks import open_record_log
from swarm_node.node.observe.progress import Progress
from swarm_node.node.observe.status import StatusFile
from swarm_node.node.run.role_context import RoleContext
from swarm_node.node.run.roles import make_role
from swarm_node.node.run.behaviour_lag import LaggedBehaviour
from swarm_node.node.checkpoint.checkpoint import save_checkpoint
from swarm_node.node.config.config import NodeConfig, batch_overlap
from swarm_node.node.evaluate.evaluate import HeldOut
from swarm_node.node.run.overlap import GenerationAhead
from swarm_node.node.run.own_groups import FamilyCorrectness, OwnGroups, own_groups, take_replacing
from swarm_node.node.run.peer_sft import choose_supervised, failing_kinds, targets
from swarm_node.node.checkpoint.resume import node_state
from swarm_node.node.run.rollouts import external_samples, to_records, to_train_samples
from swarm_node.node.run.signal_watch import SignalWatch
from swarm_node.node.run.startup import start_node
from swarm_node.node.run.step_generation import StepGenerator, StepRollouts
from swarm_node.node.run.stop_signals import StopSignals
from swarm_node.node.run.stopping import StopRequest, close_within
from swarm_node.node.run.summary import write_summary
from swarm_node.node.swarm.exchange import SwarmExchange
from swarm_node.node.swarm.pool import PeerGroup
from swarm_node.node.transport import Transport
from swarm_node.policies.learner import Learner
from swarm_node.policies.policy import Policy, SamplingParams

if TYPE_CHECKING:
    from swarm_node.policies.vllm_backend import VllmSampler

log = logging.getLogger(__name__)

__all__ = ["TrainingNode"]

COINCIDE_STEPS = 20  # consecutive same-batch steps before the node warns (_warn_if_batches_coincide)


class TrainingNode:
    """One node's training run in its run folder: the round loop (``run``) and its step."""

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
        self._stop = StopRequest()  # cuts the waits for a round or for peers short (node/run/stopping.py)
        self.lagged = LaggedBehaviour(policy, cfg.train.behaviour_lag, learner.version)
        self.metrics = open_record_log(run_dir, start_step, tensorboard=cfg.run.tensorboard, wandb=cfg.run.wandb,
                                       wandb_project=cfg.run.wandb_project, config_json=cfg.to_json())
        self.sampling = SamplingParams(max_new_tokens=cfg.generation.max_completion_length,
                                       temperature=cfg.generation.temperature,
                                       top_p=cfg.generation.top_p, top_k=cfg.generation.top_k)
        for p in (policy, self.lagged.behaviour):  # the lagged copy samples when behaviour_lag > 0
            if p is not None:
                p.generation_batch_size = cfg.generation.batch_size
        self.reward_cfg = cfg.tasks.reward_config(policy.prompt_format.kind)
        self.swarm = swarm
        self.endpoint = endpoint
        self.clock = swarm.clock if swarm is not None else None
        self.last_round: int | None = None
        self.rounds_skipped = 0
        self._closed = False
        self.signals: StopSignals | None = None
        self._coincide_warned = False
        self._coincide_steps = 0  # consecutive steps in which this node took every peer group
        self.status = status or StatusFile(run_dir, cfg.train.steps, cfg.model.name, start_step)
        self.role = make_role(cfg.broadcast.role)  # node/run/roles.py: full, learner or worker
        self.role_ctx = self._role_context()
        self.families = FamilyCorrectness()  # own running correctness per family: swarm.select = weakest
        # The kinds of question this node gets all wrong: learner.peer_sft_coef's rows (node/run/peer_sft.py).
        self.failing = failing_kinds(cfg.learner.peer_sft_coef, self.role.learns)
        self.signal = SignalWatch(cfg.run.log_samples, cfg.generation.max_completion_length, self.status)
        self.held_out = HeldOut(cfg, policy, self.status, vllm, halt=lambda: self.stop_requested)  # evaluate.py
        self.generator = StepGenerator(cfg, policy, learner, self.lagged, vllm, self.role, self.role_ctx,
                                       self.held_out.reserved, self.reward_cfg, self.sampling)
        self.ahead: GenerationAhead | None = None  # train.max_async > 0: generation runs ahead (run())
        self.run_lock = None  # the run folder's lock (node/run/run_lock.py), set by start_node
        self.peer_cache_task: asyncio.Future | None = None  # keeps RUN/peers.json (node/swarm/peer_cache.py)

    def _role_context(self) -> RoleContext:
        """What the role may read and call of this node (node/run/role_context.py)."""
        bc, swarm, vllm = self.cfg.broadcast, self.swarm, self.vllm
        return RoleContext(
            settings=bc,
            swarm_name=self.cfg.swarm.name, run_dir=Path(self.run_dir), policy=self.policy,
            transport=swarm.transport if swarm is not None else None,
            identity=swarm.identity if swarm is not None else None,
            learner_version=lambda: self.learner.version, step=lambda: self.step,
            stop_requested=lambda: self.stop_requested, set_phase=self.status.phase,
            after_apply=(lambda: vllm.sync(self.policy)) if vllm is not None else None,
            heard_at=lambda p: getattr(swarm.peers.get(p), "created_at", None) if swarm is not None else None,
            link_up=lambda: swarm is None or swarm.link.up)

    @classmethod
    async def create(cls, cfg: NodeConfig, transport: Transport | None = None) -> "TrainingNode":
        """Load the policy (building the default model if needed), resume if asked, and join the
        swarm when ``swarm.transport`` is set (``transport`` overrides the configured one).

        Everything that can be checked without loading the model is checked first (the run
        folder, the device, the checkpoint's settings). A start that fails leaves no trace in
        a run folder it created, and ``config.json`` is written only once the node is up
        (node/run/startup.py)."""
        return await start_node(cls, cfg, transport)

    # -- one step ---------------------------------------------------------------------------
    async def _rollouts(self, step: int) -> StepRollouts:
        """This step's local rollouts: generated ahead (``train.max_async``), or now; ``gen_wait``
        is how long the step waited for them (all of ``gen_time`` when nothing runs ahead)."""
        t0 = time.perf_counter()
        if self.ahead is not None:
            made = await self.ahead.take(step)
        else:
            made = await asyncio.to_thread(self.generator, step, self.cfg.local_groups, self._task_seed())
        made.metrics["gen_wait"] = time.perf_counter() - t0
        return made

    def _task_seed(self) -> int | str:
        """What a step's task ids are drawn from: the run's seed, and in a swarm the node's id
        (nodes must not all ask the same questions)."""
        seed = self.cfg.train.seed
        return seed if self.swarm is None else f"{seed}:{self.swarm.peer_id}"

    def _learn(self, step: int, made: StepRollouts, groups: list[PeerGroup] | None = None,
               own: OwnGroups | None = None) -> dict:
        """Score peers' groups, update the policy, and build the step's metrics (worker thread)."""
        cfg = self.cfg
        t0 = time.perf_counter()
        rollouts, t_gen = made.rollouts, made.seconds
        staleness = self.learner.version - made.version
        # The staleness bound: rollouts from a policy too many versions old are dropped, counted.
        own = own or own_groups(rollouts, cfg.swarm.replace_uninformative)  # own zero-variance groups left out
        local = own.keep(to_train_samples(rollouts))
        samples = [s for s in local if self.learner.version - s.policy_version <= cfg.learner.max_off_policy_steps]
        dropped = len(local) - len(samples)
        ext_correct: list[float] = []
        too_long = 0
        role_info: dict = {}
        if groups:
            groups, role_info = self.role.admit_groups(self.role_ctx, groups)  # a learner's bound on its workers' lag
        if groups:
            ext, ext_correct, too_long = external_samples(
                groups, self.policy, self.reward_cfg, cfg.group_size, cfg.generation.max_completion_length)
            samples += ext
        sft = None
        if self.failing is not None:  # this step's own groups first: "all wrong" includes them
            self.failing.update(rollouts)
            proven = self.swarm.work.proven if self.swarm is not None else (lambda sender: False)
            sft = choose_supervised(samples, targets(groups or (), self.policy.encode_completion), self.failing.fails,
                                    cfg.learner.peer_sft_rows, cfg.swarm.max_sender_share, proven)
            samples = sft.samples
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
            "format": float(np.mean([r.reward.well_formed for r in rollouts])),
            "answered": float(np.mean([r.reward.answered for r in rollouts])),  # an answer could be read
            "truncated": float(np.mean([r.completion.truncated for r in rollouts])),
            "staleness": float(staleness),
            "dropped_stale": dropped,
            "tokens_per_s": n_tok / max(t_gen, 1e-9),
            "gen_time": t_gen,
            "learn_time": time.perf_counter() - t0,
            **learn,
            "policy_version": self.learner.version,
            # Out-of-memory recovery (policies/oom.py): rows a generate call (gen_batch), halvings
            # this step (gen_oom_halvings); partial rollouts' counts (node/run/april.py).
            **made.metrics,
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
        record.update(own.metrics(groups))
        if sft is not None:
            record.update(sft.metrics(self.failing.failing()))
        record.update(role_info)
        self.signal.after_step(record, rollouts)  # run.log_samples; warns when nothing is learnt (signal_watch.py)
        return record

    async def _step(self) -> dict | None:
        t0 = time.perf_counter()
        if self.swarm is None:
            made = await self._rollouts(self.step)
            record = await asyncio.to_thread(self._learn, self.step, made)
        else:
            record = await self._swarm_step()
            if record is None:
                return None
        if self.ahead is not None:
            await self.ahead.learned(self.step)
        await self.role.after_step(self.role_ctx, record)
        record["step_time"] = time.perf_counter() - t0
        return record

    async def _swarm_step(self) -> dict | None:
        """One SAPO step in the current round of the shared clock: generate I groups, publish
        them, collect J peer groups (until the round ends at most), learn from all of them."""
        sw, clock, scfg = self.swarm, self.clock, self.cfg.swarm
        await self.role.before_step(self.role_ctx)  # a worker waits for weights fresh enough to share
        if self.stop_requested and self.role.rollout_version(self.role_ctx) is None:
            return None  # stopped before it had any weights to generate with
        r = clock.current()
        if self.last_round is not None and r <= self.last_round:
            if not await self._stop.unless_requested(clock.wait_for(self.last_round + 1)):  # one step a round
                return None  # stopped before this step began
            r = clock.current()
        # A node that fell behind joins the current round; the rounds it missed are counted.
        skipped = 0 if self.last_round is None else r - self.last_round - 1
        self.rounds_skipped += skipped
        self.last_round = r
        first = self.step == self.start_step
        if first:
            self.status.phase("generating the first rollouts")
        made = await self._rollouts(self.step)
        rollouts = made.rollouts
        await sw.publish(r, made.version, to_records(rollouts, frozenset(self.policy.tokenizer.all_special_ids),
                                                     self.policy.tokenizer.eos_token_id))
        await sw.announce(r, self.learner.version)
        j = scfg.external_groups if self.role.learns else 0  # a worker trains on nothing: takes nothing
        deadline = time.time() + scfg.collect_seconds if scfg.collect_seconds > 0 else clock.end_of(r)
        if first and j:
            until = (f"for at most {scfg.collect_seconds:g} s" if scfg.collect_seconds > 0
                     else f"at most until round {r} ends")
            self.status.phase("waiting for peers", f"{j} peer groups, {until}")
        await self._stop.unless_requested(sw.wait_for(j, deadline))  # stopped: learn from what came
        groups, own = take_replacing(sw, rollouts, j, r, scfg.replace_uninformative, self.families)  # own_groups.py
        st_now = sw.status()
        # Peers: those alive now, or ever heard from (heartbeats arrive over the first rounds).
        self._warn_if_batches_coincide(len(groups), max(st_now["peers_alive"], st_now["peers_heard"]))
        record = await asyncio.to_thread(self._learn, self.step, made, groups, own)
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
            "found_via": st.get("found_via", ""),  # bootstrap, peer cache, new swarm, broker: the live line shows it
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
        sampler = self.generator.sampler_policy
        return {"micro_batch_size": self.learner.micro_batch_size,
                "generation_batch_size": sampler.generation_batch_size,
                "learner_oom_halvings": self.learner.oom_halvings,
                "generation_oom_halvings": sampler.generation_oom_halvings}

    # -- the loop ---------------------------------------------------------------------------
    def request_stop(self) -> None:
        if self.stop_requested:
            log.warning("already stopping: a second Ctrl-C does not hurry it (kill -9 does, losing the steps "
                        "since the last checkpoint)")
        else:
            # No step number ahead of the fact: a step still waiting for its round is dropped,
            # one past that is finished; the checkpoint's line says which step it holds.
            if self.step >= self.cfg.train.steps:
                log.warning("stop requested: training is done (%d steps); finishing up", self.step)
            else:
                log.warning("stop requested after %d of %d steps: the step under way is finished if it has "
                            "started, then checkpointed", self.step, self.cfg.train.steps)
        self.stop_requested = True
        self._stop.request()

    async def run(self, handle_signals: bool = True) -> dict:
        """Train to ``train.steps``. With ``handle_signals`` (one node per process), SIGINT and
        SIGTERM stop it after the current step; a host running several nodes handles signals
        itself and calls ``request_stop`` on each."""
        if handle_signals and self.signals is None:  # until close (node/run/stop_signals.py)
            self.signals = StopSignals(asyncio.get_running_loop(), self.request_stop)
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
        if self.cfg.train.max_async > 0:
            self.ahead = GenerationAhead(lambda s: self.generator(s, self.cfg.local_groups, self._task_seed()),
                                         self.cfg.train.max_async, self.step, sampler=self.generator.sampler_policy)
        try:
            self.metrics.start_eval(await self.held_out.before_training(self.step, self.stop_requested))
            progress.begin(self.run_dir)
            if self.ahead is not None:  # after the first evaluation: it reads the live weights, not the copy
                self.ahead.start()
            self.status.phase("training" if self.swarm is None else "training (first step)")
            while self.step < total and not self.stop_requested:
                record = await self._step()
                if record is None:  # stopped while waiting (a worker without weights yet)
                    break
                self.step += 1
                await self.held_out.after_step(self.step, record, self.stop_requested)  # record["eval"] when due
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
            if self.ahead is not None:
                await self.ahead.close()
                self.ahead = None
            if self.generator.april is not None:
                self.generator.april.drop()
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
        state = node_state(self.cfg, self.policy, self.learner, self.step)
        path = save_checkpoint(self.run_dir / "checkpoints", state, keep_last=self.cfg.run.keep_checkpoints)
        log.info("checkpoint %s (step %d, policy v%d)", path.name, self.step, self.learner.version)
        return path

    def _finish(self, wall_s: float) -> dict:
        return write_summary(self.run_dir, steps=self.step,
                             stopped_early=self.stop_requested and (self.step < self.cfg.train.steps
                                                                    or self.held_out.cut_short),
                             wall_s=wall_s, swarm_status=self.swarm.status() if self.swarm is not None else None,
                             rounds_skipped=self.rounds_skipped, plot=self.cfg.run.plot)

    async def close(self) -> None:
        if not self._closed:
            self._closed = True
            try:
                if self.vllm is not None:
                    self.vllm.close()
                if self.peer_cache_task is not None:  # saves the cache once more as it ends
                    self.peer_cache_task.cancel()
                    await asyncio.gather(self.peer_cache_task, return_exceptions=True)
                await close_within("the weight broadcast", self.role.close())  # before the swarm: it shares its link
                if self.swarm is not None:
                    await close_within("the swarm connection", self.swarm.close())
            finally:
                if self.endpoint is not None:
                    self.endpoint.close()
                self.metrics.close()
                if self.run_lock is not None:
                    self.run_lock.release()
                if self.signals is not None:  # the last thing: a Ctrl-C until here is one more request
                    self.signals.release()
