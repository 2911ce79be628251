"""Generation ahead of learning (``train.max_async`` > 0): a node samples step s+1's rollouts while
it learns on step s's, instead of generating, then learning, then generating again.

Two pieces. ``GeneratorCopy`` is a second instance of the policy (on ``generation.device``, by
default the model's) that samples while the learner updates the first; before each step's
generation it copies the learner's current weights, reading them and their version under the
policy's weights lock, which the learner holds while it changes them (policies/learner.py), so the
label a rollout carries is exactly the version that sampled it. ``GenerationAhead`` schedules:
step t's generation may start once step t-1-max_async's learning is done, so with max_async k a
rollout is at most k versions older than the learner that trains on it (staleness k, corrected
like any off-policy data), and k = 0 is the synchronous loop. It runs in its own thread; so does
the learner's step, and on a CPU they share the cores.

Checkpoints and resume: a checkpoint at step N holds the learner's weights after N updates; a
generation already running for a later step belongs to no checkpoint and is dropped at a stop, so
a resumed run generates step N+1 again, from step N's weights. A thread cannot be interrupted, and
the process's exit waits for it, so the stop raises ``stopping``, which the sampling copy's
``Policy.halt`` reads once per new token (policies/halt.py): the generation ends at its next token
with ``GenerationStopped``, and ``close`` waits for that (at most ``stop_wait_s``). The swarm's round clock is
unchanged: a step's rollouts are published when its round begins, however early they were made.
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import logging
import threading
from typing import Callable, Generic, TypeVar

import torch

from swarm_node.policies.policy import Policy

log = logging.getLogger(__name__)

__all__ = ["GeneratorCopy", "GenerationAhead", "may_start"]

T = TypeVar("T")


def may_start(step: int, learned: int, max_async: int) -> bool:
    """Whether step ``step``'s generation may start when ``learned`` steps have been learned:
    once step ``step - 1 - max_async`` has (so its rollouts are at most ``max_async`` versions
    behind the learner that trains on them)."""
    return step - learned <= max_async


class GeneratorCopy:
    """A second instance of the policy that samples while the learner trains the first."""

    def __init__(self, policy: Policy, device: str):
        model = copy.deepcopy(policy.model).to(device)
        self.policy = Policy(model, policy.tokenizer, policy.name)
        self.policy.prompt_format = policy.prompt_format  # it samples the same prompts
        self.policy.generation_batch_size = policy.generation_batch_size
        self.version: int | None = None
        # On CUDA the copy samples on a stream of its own, so its kernels can run beside the
        # learner's (on the shared default stream they would queue behind them).
        self.stream = torch.cuda.Stream(self.policy.device) if self.policy.device.type == "cuda" else None

    def _settle(self, live: Policy) -> None:
        """Wait for the devices' queued work: the learner's last update must be written before
        the copy reads it, and the copy done before the learner may write again."""
        for dev in {live.device, self.policy.device}:
            if dev.type == "cuda":
                torch.cuda.synchronize(dev)

    def sampling(self):
        """The context generation runs in: the copy's own CUDA stream, or nothing on a CPU."""
        return torch.cuda.stream(self.stream) if self.stream is not None else contextlib.nullcontext()

    def sync(self, live: Policy, version_of: Callable[[], int]) -> int:
        """Copy ``live``'s weights if its version moved; returns the version this copy now holds.
        Read under ``live``'s weights lock: the weights and their version are one update's."""
        with live.weights_lock:
            version = version_of()
            if version != self.version:
                self._settle(live)
                state = live.trained_state()
                with self.policy.weights_lock:
                    self.policy.load_trained_state(state)  # copies into this model's own tensors
                self._settle(live)
                self.version = version
        return version


class GenerationAhead(Generic[T]):
    """Runs ``generate(step)`` in a worker thread for each step in turn, as far ahead of the
    learner as ``may_start`` allows; ``take(step)`` waits for that step's result and
    ``learned(step)`` says a step's learning is done. Owned by the round loop: ``start`` it
    inside the loop's event loop, ``close`` it when the loop ends."""

    def __init__(self, generate: Callable[[int], T], max_async: int, first_step: int,
                 sampler: Policy | None = None, stop_wait_s: float = 10.0):
        if max_async < 1:
            raise ValueError("max_async must be >= 1 (0 is the synchronous loop)")
        self._generate = generate
        self.stopping = threading.Event()  # raised by close: the generation in flight ends at its next token
        self._idle = threading.Event()  # no generation runs in the worker thread
        self._idle.set()
        self.stop_wait_s = stop_wait_s
        self.sampler = sampler
        if sampler is not None:
            sampler.halt = self.stopping.is_set
        self.max_async = max_async
        self._learned = first_step  # steps learned so far (the step being learned next)
        self._next = first_step  # the next step to generate
        self._results: dict[int, asyncio.Future] = {}
        self._changed: asyncio.Condition | None = None
        self._task: asyncio.Task | None = None
        self.generating: int | None = None  # the step whose generation runs now

    def start(self) -> None:
        self._changed = asyncio.Condition()
        self._task = asyncio.create_task(self._run(), name="generation-ahead")

    def _future(self, step: int) -> asyncio.Future:
        if step not in self._results:
            self._results[step] = asyncio.get_running_loop().create_future()
        return self._results[step]

    async def _run(self) -> None:
        while True:
            async with self._changed:
                await self._changed.wait_for(lambda: may_start(self._next, self._learned, self.max_async))
            step, fut = self._next, self._future(self._next)
            self.generating = step
            try:
                self._idle.clear()
                result = await asyncio.to_thread(self._in_thread, step)
                if not fut.done():
                    fut.set_result(result)
            except asyncio.CancelledError:
                raise
            except BaseException as e:  # noqa: BLE001 - the step that takes it raises it
                if not fut.done():
                    fut.set_exception(e)
                return
            finally:
                self.generating = None
            self._next += 1

    def _in_thread(self, step: int) -> T:
        try:
            return self._generate(step)
        finally:
            self._idle.set()

    async def take(self, step: int) -> T:
        """Step ``step``'s rollouts, generated ahead or waited for; its generation's error, if
        it failed."""
        result = await asyncio.shield(self._future(step))  # a cancelled wait leaves the step's future
        del self._results[step]
        return result

    async def learned(self, step: int) -> None:
        """Step ``step``'s learning is done: later generations may start."""
        async with self._changed:
            self._learned = step + 1
            self._changed.notify_all()

    async def close(self) -> None:
        """Stop generating ahead. A generation running in its thread is asked to end at its next
        token (``stopping``) and waited for, ``stop_wait_s`` at most (one that does not read the
        flag is left to finish there); its rollouts are dropped."""
        self.stopping.set()
        if self._task is not None:
            self._task.cancel()
            try:
                await self._task
            except (asyncio.CancelledError, Exception):  # noqa: BLE001 - its error belongs to a step never taken
                pass
            self._task = None
        if not self._idle.is_set() and not await asyncio.to_thread(self._idle.wait, self.stop_wait_s):
            log.warning("the generation running ahead did not stop within %g s: left to finish in its thread",
                        self.stop_wait_s)
        if self.sampler is not None:
            self.sampler.halt = None  # the copy may sample again (a later GenerationAhead)
        for fut in self._results.values():
            if fut.done() and not fut.cancelled():
                fut.exception()  # retrieved: a dropped step's error is not "never retrieved"
        self._results.clear()
