"""Held-out evaluation: how often the policy answers tasks it never trains on, per family.

The tasks are fixed ids from the held-out seed space (rewards/held_out.py): training never draws
them and admission refuses a peer's group that names one, so the numbers measure generalisation,
not memory, and two nodes' numbers are on the same questions. Each task gets one greedy completion
(argmax at every token) and ``samples`` completions at the node's sampling temperature; a
completion is correct when the training reward's correctness term says so (rewards/scoring.py,
the same ``RewardConfig``). Reported per family and overall:

- greedy pass@1: the fraction of tasks whose greedy completion is correct;
- sampled pass@1: the mean correctness over the k samples of a task, averaged over tasks;
- pass@k (optional): the unbiased estimate 1 - C(n-c, k) / C(n, k) from a task's n samples, c of
  them correct, averaged over tasks.

The statistics are pure functions. ``evaluate`` generates with the node's own sampler (the policy,
or its vLLM engine) under the policy's weights lock, on a GPU in calls of no more rows than a
training step generates, and with torch's random stream forked and seeded from (seed, step): in a
node's own process an evaluation neither changes what training samples next nor depends on when it
ran (the in-memory simulator's nodes share one generator: ``evaluate`` says what that costs). ``HeldOut`` is the node's
hook: it decides when an evaluation is due and puts its result in the step's record and in
``status.json``.
"""

from __future__ import annotations

import asyncio
import copy
import json
import logging
import math
import random
import time
from collections.abc import Callable, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import torch

from swarm_node.node.observe.held_out import answers_digest, describe_eval, eval_file
from swarm_node.node.observe.status import StatusFile
from swarm_node.node.config.eval_config import EvalConfig
from swarm_node.policies.halt import GenerationStopped, HaltWhen
from swarm_node.policies.micro_batches import longest_first
from swarm_node.policies.policy import Policy, SamplingParams, TokenBatch
from swarm_node.protocol.task_id import TaskId
from swarm_node.rewards.reserved import held_out_set, why_unevaluated
from swarm_node.rewards.registry import make_task
from swarm_node.rewards.scoring import RewardConfig, score

if TYPE_CHECKING:
    from swarm_node.node.config.config import NodeConfig
    from swarm_node.policies.vllm_backend import VllmSampler

log = logging.getLogger("swarm_node.node.run.evaluate")  # the log name before the split: filters select it

CPU_ROWS_PER_CALL = 256  # the fewest rows an evaluation's generate call takes on a CPU (eval_settings)

__all__ = ["TaskOutcome", "pass_at_k", "summarise", "greedy_texts", "EvalSettings", "eval_settings", "evaluate",
           "HeldOut", "CPU_ROWS_PER_CALL"]


# -- the statistics (pure) ----------------------------------------------------------------------
@dataclass(frozen=True)
class TaskOutcome:
    """One held-out task's completions, scored: the greedy one's correctness (None when not
    asked) and each sample's."""

    family: str
    greedy: float | None
    samples: tuple[float, ...]


def pass_at_k(n: int, c: int, k: int) -> float:
    """The unbiased pass@k estimate from n samples of which c are correct: the probability that
    k of them drawn without replacement hold at least one correct, 1 - C(n-c, k) / C(n, k)."""
    if not 0 <= c <= n or not 1 <= k <= n:
        raise ValueError(f"pass@k needs 0 <= c <= n and 1 <= k <= n, got n={n}, c={c}, k={k}")
    return 1.0 - math.comb(n - c, k) / math.comb(n, k)


def _mean(xs: list[float]) -> float | None:
    return sum(xs) / len(xs) if xs else None


def _stats(outcomes: Sequence[TaskOutcome], k: int) -> dict:
    greedy = [o.greedy for o in outcomes if o.greedy is not None]
    sampled = [sum(o.samples) / len(o.samples) for o in outcomes if o.samples]
    out = {"greedy": _mean(greedy), "sampled": _mean(sampled), "n": len(outcomes)}
    if k:
        out["pass_at_k"] = _mean([pass_at_k(len(o.samples), round(sum(o.samples)), k) for o in outcomes if o.samples])
    return out


def summarise(outcomes: Sequence[TaskOutcome], k: int = 0) -> dict:
    """Overall and per-family greedy pass@1, sampled pass@1 (and pass@k when ``k``), each with
    ``n``, its number of tasks; a statistic nothing was generated for is None."""
    families: dict[str, list[TaskOutcome]] = {}
    for o in outcomes:
        families.setdefault(o.family, []).append(o)
    out = _stats(outcomes, k)
    if k:
        out["k"] = k
    out["families"] = {f: _stats(group, k) for f, group in families.items()}
    return out


# -- generation ---------------------------------------------------------------------------------
def greedy_texts(policy: Policy, prompts: list[str], max_new_tokens: int, rows_per_call: int,
                 halt: Callable[[], bool] | None = None) -> list[str]:
    """One greedy completion per prompt (do_sample off: the most likely token at every step), up
    to and including EOS, decoded as ``Policy.generate`` decodes. The policy's sampler records
    behaviour log-probs at a temperature > 0 and has no greedy mode, so this calls the model's
    ``generate`` itself, on the policy's clean generation config (policies/sampling.py). When
    ``halt()`` turns true, the call ends at the next token and ``GenerationStopped`` is raised."""
    from transformers import StoppingCriteriaList

    pad, eos = int(policy.tokenizer.pad_token_id), policy.eos_token_id
    gen = copy.deepcopy(policy.model.generation_config)
    gen.update(do_sample=False, max_new_tokens=max_new_tokens, eos_token_id=eos, pad_token_id=pad)
    rows = policy.encode_prompts(prompts)
    order = longest_first([len(r) for r in rows])  # a call's prompts of about one length
    texts: list[str] = [""] * len(rows)
    with policy.weights_lock, torch.no_grad():
        was_training = policy.model.training
        policy.model.eval()
        try:
            for i in range(0, len(rows), rows_per_call):
                call = order[i:i + rows_per_call]
                batch = TokenBatch.build([rows[j] for j in call], [()] * len(call), pad)
                P = batch.prompt_len
                stop = HaltWhen(halt) if halt is not None else None
                seqs = policy.sampling_model().generate(input_ids=batch.input_ids[:, :P].to(policy.device),
                                             attention_mask=batch.attention_mask[:, :P].to(policy.device),
                                             generation_config=gen,
                                             stopping_criteria=StoppingCriteriaList([stop] if stop else []))
                if stop is not None and stop.fired:
                    raise GenerationStopped("evaluation stopped by request")
                for j, new in zip(call, seqs[:, P:].tolist()):
                    ids = new[:new.index(eos) + 1] if eos in new else new
                    texts[j] = policy.tokenizer.decode(ids, skip_special_tokens=True)
        finally:
            policy.model.train(was_training)
    return texts


@dataclass(frozen=True)
class EvalSettings:
    """What one evaluation asks: its task ids and how to generate for them."""

    task_ids: tuple[TaskId, ...]
    greedy: bool
    samples: int
    pass_k: int
    max_new_tokens: int
    temperature: float
    rows_per_call: int  # completions a generate call takes at most (eval_settings says how many)
    reward: RewardConfig | None  # None: the prompt format is not known yet (evaluate refuses it)
    unevaluated: tuple[str, ...] = ()  # families with no held-out question: not evaluated (said in the log)


def eval_settings(cfg: "NodeConfig", ev: EvalConfig | None = None, *, prompt_kind: str | None) -> EvalSettings:
    """The evaluation a node with config ``cfg`` runs (``ev`` overrides its ``[eval]`` section),
    prompting as ``prompt_kind`` says ("raw" or "chat": it decides where answers are read; None
    before the model is loaded, and the caller sets ``reward`` once it is: no default, so no
    caller reads a chat model's answers as a raw prompt's by forgetting it).

    Rows per generate call: ``generation.batch_size`` when set; else, on a GPU, the rows a training
    step generates (I groups of G), so evaluation fits wherever training does; on a CPU, whose
    memory does not bind at these sizes but whose cost per call does (a tiny model took 0.67 s in
    calls of 16 rows, 0.2 s in calls of 320), at least ``CPU_ROWS_PER_CALL``.

    A family with no held-out question (a dataset of a few rows, rewards/reserved.py) is left out,
    with a warning that names it and says why. On the embedded default model, an evaluation that may
    ask questions its warm start was taught (more tasks a family than it left out, or other levels)
    is warned about (policies/default_model.py ``held_out_warning``)."""
    ev = ev or cfg.eval
    g = cfg.generation
    rows = g.batch_size or cfg.local_groups * cfg.group_size
    if not g.batch_size and not cfg.model.device.startswith("cuda"):
        rows = max(rows, CPU_ROWS_PER_CALL)
    held = held_out_set(cfg.tasks.names, cfg.tasks.difficulties, ev.tasks_per_family)
    for family in held.unevaluated:
        log.warning("no held-out questions for task family %s: %s; it is trained on but not evaluated",
                    family, why_unevaluated(family, cfg.tasks.difficulties))
    if cfg.model.name == "default":
        from swarm_node.policies.default_model import held_out_warning

        taught = held_out_warning(cfg.tasks.names, cfg.tasks.difficulties, ev.tasks_per_family)
        if taught is not None:
            log.warning("%s", taught)
    return EvalSettings(task_ids=held.ids, greedy=ev.greedy, samples=ev.samples, pass_k=ev.pass_k,
                        max_new_tokens=ev.max_completion_length or g.max_completion_length,
                        temperature=g.temperature, rows_per_call=rows,
                        reward=None if prompt_kind is None else cfg.tasks.reward_config(prompt_kind),
                        unevaluated=held.unevaluated)


def evaluate(policy: Policy, s: EvalSettings, seed: int | str, sampler: "Policy | VllmSampler | None" = None,
             halt: Callable[[], bool] | None = None) -> dict:
    """Evaluate ``policy`` on the held-out tasks of ``s``; ``summarise``'s dict plus ``seconds``.

    ``sampler`` draws the samples (the node's own: its vLLM engine, which holds the policy's
    weights; default the policy). Torch's random stream is forked and seeded from ``seed``, so in a
    node's own process the samples depend on it alone and the caller's stream is left as it was (in
    the in-memory simulator the nodes share one process and torch's one generator, whose draws
    interleave between nodes' threads: there the samples are not reproducible per node). The result lists
    ``unevaluated`` families, when there are any. ``halt`` (a node's stop request) ends it at the
    next token with ``GenerationStopped``: a stop does not wait out an evaluation."""
    if s.reward is None:
        raise ValueError("the evaluation's reward is not set: eval_settings needs the policy's prompt kind")
    t0 = time.perf_counter()
    sampler = sampler or policy
    tasks = [make_task(t) for t in s.task_ids]
    prompts = [policy.prompt_of(t) for t in tasks]
    devices = [policy.device.index or 0] if policy.device.type == "cuda" else []
    with policy.weights_lock, torch.random.fork_rng(devices=devices):
        torch.manual_seed(random.Random(f"swarm-node:eval:{seed}").getrandbits(63))
        greedy = greedy_texts(policy, prompts, s.max_new_tokens, s.rows_per_call, halt) if s.greedy and prompts else None
        groups: list[list] = []
        if s.samples and prompts:
            params = SamplingParams(max_new_tokens=s.max_new_tokens, temperature=s.temperature)
            per_call = max(1, s.rows_per_call // s.samples)  # prompts a call, so its rows stay within a step's
            order = longest_first([len(r) for r in policy.encode_prompts(prompts)])
            groups = [[] for _ in prompts]
            for i in range(0, len(prompts), per_call):
                if halt is not None and halt():  # between calls; within one, a vLLM engine is not stopped
                    raise GenerationStopped("evaluation stopped by request")
                call = order[i:i + per_call]
                with _halted(sampler, halt):
                    for j, group in zip(call, sampler.generate([prompts[j] for j in call], s.samples, params)):
                        groups[j] = group
    outcomes = [TaskOutcome(task.id.family,
                            score(task, greedy[i], s.reward).correctness if greedy is not None else None,
                            tuple(score(task, c.text, s.reward).correctness for c in groups[i]) if groups else ())
                for i, task in enumerate(tasks)]
    skipped = {"unevaluated": list(s.unevaluated)} if s.unevaluated else {}
    answers = {"greedy_answers": answers_digest(greedy)} if greedy is not None else {}
    return {**summarise(outcomes, s.pass_k), **skipped, **answers, "seconds": time.perf_counter() - t0}


@contextmanager
def _halted(sampler, halt: Callable[[], bool] | None):
    """``halt`` as ``sampler``'s stop flag while in the block, where it has one (a ``Policy``);
    its own flag (None for the node's policy) back afterwards."""
    if halt is None or not isinstance(sampler, Policy):
        yield
        return
    before, sampler.halt = sampler.halt, halt
    try:
        yield
    finally:
        sampler.halt = before


# -- the node's hook ----------------------------------------------------------------------------
class HeldOut:
    """A training node's held-out evaluation: every ``eval.every`` steps and after the last step
    (``eval.at_end``), not when the node is stopping (a stop must be prompt). The result goes into
    that step's metrics record (``record["eval"]``) and, as the latest, into status.json
    (``eval``, with its step), from which the metrics endpoint and the live tables read it."""

    def __init__(self, cfg: "NodeConfig", policy: Policy, status: StatusFile, sampler: "VllmSampler | None" = None,
                 halt: Callable[[], bool] | None = None):
        self.halt = halt  # the node's stop request: an evaluation under way ends at the next token
        self.cut_short = False  # an evaluation was stopped by it (the run's summary says stopped early)
        self.every, self.at_end, self.seed = cfg.eval.every, cfg.eval.at_end, cfg.train.seed
        self.at_start, self.run_dir = cfg.eval.at_start, Path(cfg.run.dir)
        self.total = cfg.train.steps
        self.settings = eval_settings(cfg, prompt_kind=policy.prompt_format.kind) if self.every or self.at_end else None
        if self.settings is not None and not self.settings.task_ids:
            log.warning("held-out evaluation is off: no task family has held-out questions (above)")
            self.settings = None
        self.policy, self.sampler, self.status = policy, sampler, status
        # The questions it evaluates on, kept out of training even when it never evaluates, so
        # that turning evaluation on or off does not change what the node trains.
        self.reserved = held_out_set(cfg.tasks.names, cfg.tasks.difficulties, cfg.eval.tasks_per_family)

    def due(self, step: int, stopping: bool) -> bool:
        if self.settings is None or stopping:
            return False
        return bool(self.every and step % self.every == 0) or (self.at_end and step == self.total)

    async def before_training(self, step: int, stopping: bool) -> dict | None:
        """The evaluation before the first step (``eval.at_start``), written to
        ``RUN/eval/step_0.json`` and returned: only for a run starting from scratch (a resumed run
        made its own)."""
        if step != 0:
            return None
        path = eval_file(self.run_dir, 0)
        path.unlink(missing_ok=True)  # a run starting over in a reused folder: that start is not this one's
        if not (self.at_start and self.settings is not None and not stopping):
            return None
        result = await self._evaluate(0)
        if result is not None:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(json.dumps({"step": 0, **result}, indent=2))
        return result

    async def after_step(self, step: int, record: dict, stopping: bool) -> None:
        """Evaluate after ``step`` when due (in a worker thread, as generation runs), adding the
        result to ``record`` and to the status."""
        if not self.due(step, stopping):
            if stopping and self.due(step, False):  # said, and the run counts as stopped early
                log.warning("held-out evaluation after step %d skipped: the node is stopping (swarm-node eval RUN "
                            "evaluates the checkpoint afterwards)", step)
                self.cut_short = True
            return
        result = await self._evaluate(step, record)
        if result is not None:
            record["eval"] = result

    async def _evaluate(self, step: int, record: dict | None = None) -> dict | None:
        """Evaluate now (in a worker thread, as generation runs); the result, also the status's
        latest, or None when it failed (said in the log and in ``record["eval_error"]``)."""
        when = f"after step {step}" if step else "before training"
        self.status.phase("evaluating", f"held-out tasks {when}")
        try:
            result = await asyncio.to_thread(evaluate, self.policy, self.settings, f"{self.seed}:{step}", self.sampler,
                                             self.halt)
        except GenerationStopped:
            log.warning("held-out evaluation %s stopped by request: not recorded (swarm-node eval RUN evaluates "
                        "the checkpoint afterwards)", when)
            self.cut_short = True
            return None
        except Exception as e:  # noqa: BLE001 - out of memory, say: the step's record and checkpoint come first
            log.exception("held-out evaluation %s failed; training goes on", when)
            if record is not None:
                record["eval_error"] = f"{type(e).__name__}: {e}"[:300]
            return None
        log.info("held-out evaluation %s: %s", when, describe_eval(result))
        self.status.extra["eval"] = {"step": step, **result}
        return result
