"""Tests of node/run/overlap.py: which step's generation may start when (hand-made timings), the
staleness that follows, a stop while a generation runs (it ends at its next token), and the
generating copy's weights and version label."""

from __future__ import annotations

import asyncio
import threading

import pytest
import torch

from swarm_node.node.run.overlap import GenerationAhead, GeneratorCopy, may_start
from swarm_node.policies.halt import GenerationStopped
from swarm_node.policies.policy import Policy, SamplingParams
from tests.helpers.wait import wait_for

pytestmark = pytest.mark.usefixtures("one_torch_thread")  # tests/conftest.py


@pytest.mark.parametrize("step,learned,k,ok", [
    (0, 0, 0, True),  # synchronous: step 0 first
    (1, 0, 0, False), (1, 1, 0, True),  # step 1 after step 0's learning
    (1, 0, 1, True),  # one ahead: step 1 while step 0 learns
    (2, 0, 1, False), (2, 1, 1, True),
    (3, 1, 2, True), (4, 1, 2, False),
])
def test_a_step_may_generate_once_the_step_max_async_before_it_has_learned(step, learned, k, ok):
    assert may_start(step, learned, k) is ok


def _schedule(max_async: int, steps: int, slow_learning: bool):
    """Run the loop with hand-made timings: generation is instant (it records the learned count
    it started at); learning is instant too, or (``slow_learning``) lasts until every generation
    the schedule allows has started. Returns, per step, the number of steps learned when its
    generation started."""
    started: dict[int, int] = {}
    learned = {"n": 0}

    def generate(step: int) -> int:
        started[step] = learned["n"]
        return step

    async def main():
        ahead = GenerationAhead(generate, max_async, first_step=0)
        ahead.start()
        try:
            for s in range(steps):
                assert await ahead.take(s) == s
                while slow_learning and not all(t in started for t in range(s, min(steps, s + max_async + 1))):
                    await asyncio.sleep(0.001)  # learning, while generation runs as far ahead as allowed
                learned["n"] = s + 1
                await ahead.learned(s)
        finally:
            await ahead.close()

    asyncio.run(main())
    return started


@pytest.mark.parametrize("k", [1, 2, 3])
def test_rollouts_are_never_more_than_max_async_versions_behind(k):
    started = _schedule(k, 12, slow_learning=True)
    # The learner trains step s at version s; step s's generation started with `started[s]`
    # updates done, so its rollouts are s - started[s] versions old, never more than k, and
    # exactly k once the pipeline is full.
    lags = [s - started[s] for s in range(12)]
    assert max(lags) == k and all(0 <= lag <= k for lag in lags)
    assert lags[k:] == [k] * (12 - k)


def test_instant_learning_keeps_rollouts_at_most_max_async_behind_too():
    started = _schedule(1, 8, slow_learning=False)
    assert all(0 <= s - started[s] <= 1 for s in range(8))


def test_a_failed_generation_is_raised_by_the_step_that_takes_it():
    def generate(step):
        if step == 1:
            raise RuntimeError("generation broke")
        return step

    async def main():
        ahead = GenerationAhead(generate, 1, first_step=0)
        ahead.start()
        try:
            assert await ahead.take(0) == 0
            await ahead.learned(0)
            with pytest.raises(RuntimeError, match="generation broke"):
                await ahead.take(1)
        finally:
            await ahead.close()

    asyncio.run(main())


def test_close_while_a_generation_that_ignores_the_stop_runs_returns_after_the_bound():
    release = threading.Event()
    running = threading.Event()

    def generate(step):  # not a policy's sampling: it never reads the stop flag
        if step == 1:
            running.set()
            release.wait(30)
        return step

    async def main():
        ahead = GenerationAhead(generate, 1, first_step=0, stop_wait_s=0.2)
        ahead.start()
        await ahead.take(0)
        await asyncio.to_thread(running.wait, 30)  # step 1 is generating in its thread
        assert ahead.generating == 1
        await asyncio.wait_for(ahead.close(), 5)  # waits the bound, then leaves the thread to finish
        release.set()

    asyncio.run(main())


def test_a_stop_ends_a_running_generation_at_its_next_token(tiny_model_dir):
    policy = Policy.load(tiny_model_dir)
    policy.model.generation_config.min_new_tokens = 900  # no EOS: it would run 900 tokens
    tokens: list[int] = [0]
    ended = threading.Event()

    def generate(step):
        try:
            return policy.generate(["1+1="], 2, SamplingParams(max_new_tokens=900))
        finally:
            ended.set()

    async def main():
        ahead = GenerationAhead(generate, 1, first_step=0, sampler=policy)
        flag = policy.halt
        assert flag is not None  # the sampler reads the schedule's stop flag

        def counted() -> bool:  # read once per new token
            tokens[0] += 1
            return flag()

        policy.halt = counted
        ahead.start()
        await wait_for(lambda: tokens[0] >= 5, 60)  # step 0 is generating
        at_stop = tokens[0]
        await ahead.close()  # raises the flag at once, then waits for the thread
        assert ended.is_set()  # the generation is over when close returns
        return at_stop

    at_stop = asyncio.run(main())
    assert tokens[0] - at_stop <= 8, (at_stop, tokens[0])  # a token or so past the stop, of 900
    assert policy.halt is None  # the copy may sample again later


def test_a_halted_sampling_call_raises_rather_than_return_cut_rows(tiny_model_dir):
    policy = Policy.load(tiny_model_dir)
    policy.halt = lambda: True
    with pytest.raises(GenerationStopped):
        policy.generate(["1+1="], 2, SamplingParams(max_new_tokens=50))
    policy.halt = lambda: False
    assert len(policy.generate(["1+1="], 2, SamplingParams(max_new_tokens=4))[0]) == 2


def test_the_copy_holds_the_version_it_was_given_until_the_next_sync(tiny_model_dir):
    live = Policy.load(tiny_model_dir)
    gen = GeneratorCopy(live, "cpu")
    version = {"v": 3}
    assert gen.sync(live, lambda: version["v"]) == 3
    first = {k: v.clone() for k, v in gen.policy.model.state_dict().items()}
    with torch.no_grad():  # the learner updates the live weights
        for p in live.model.parameters():
            p.add_(0.01)
    version["v"] = 4
    assert all(torch.equal(first[k], v) for k, v in gen.policy.model.state_dict().items())  # not yet
    assert gen.sync(live, lambda: version["v"]) == 4
    live_state = live.model.state_dict()
    assert all(torch.equal(live_state[k], v) for k, v in gen.policy.model.state_dict().items())
    assert gen.policy.model is not live.model and gen.policy.prompt_format is live.prompt_format
