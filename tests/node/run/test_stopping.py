"""A stop request cuts the node's long waits short (node/run/stopping.py): the wait for the next
round and the wait for peers, so Ctrl-C never waits out a round or ``collect_seconds``."""

from __future__ import annotations

import asyncio
import json

from swarm_node.node.run.stopping import StopRequest
from swarm_node.node.transport.memory import MemoryHub
from tests.helpers.swarm_helpers import create_node, swarm_cfg


def test_a_wait_finishes_or_is_cut_short_by_a_request():
    async def go():
        stop = StopRequest()
        done = await stop.unless_requested(asyncio.sleep(0))
        forever = asyncio.get_running_loop().create_future()  # a wait that never ends by itself
        asyncio.get_running_loop().call_soon(stop.request)
        cut = await stop.unless_requested(forever)
        after = await stop.unless_requested(asyncio.sleep(3600))  # already requested: not even started
        return done, cut, forever.cancelled(), after, bool(stop)

    assert asyncio.run(go()) == (True, False, True, False, True)


def test_a_waits_own_error_is_raised():
    async def go():
        async def fails():
            raise ValueError("the wait's own")

        return await StopRequest().unless_requested(fails())

    try:
        asyncio.run(go())
    except ValueError as e:
        assert str(e) == "the wait's own"
    else:
        raise AssertionError("the error was swallowed")


def test_a_node_stopped_while_waiting_for_peers_learns_from_what_it_has_and_stops(warm_tiny_model_dir, tmp_path,
                                                                                  caplog):
    """Alone, with J > 0, a 10-minute round and 10 minutes to collect: a stop ends the wait, the
    step is learned from its own groups, checkpointed, and the node stops (before: 10 minutes)."""
    async def scenario():
        cfg = swarm_cfg(warm_tiny_model_dir, tmp_path / "alone", **{
            "train.steps": 5, "swarm.round_seconds": 600.0, "swarm.collect_seconds": 600.0})
        node = await create_node(cfg, MemoryHub())
        task = asyncio.ensure_future(node.run(handle_signals=False))
        status = tmp_path / "alone" / "status.json"
        while not (status.exists() and json.loads(status.read_text())["phase"] == "waiting for peers"):
            assert not task.done(), task.result()
            await asyncio.sleep(0.02)
        node.request_stop()
        # Bounded only so that a regression fails instead of hanging for ten minutes.
        summary = await asyncio.wait_for(task, 300)
        await node.close()
        return summary, json.loads(status.read_text())

    summary, st = asyncio.run(scenario())
    assert st["phase"] == "stopped" and st["step"] == 1  # the step it was in was finished, not dropped
    assert "stop requested after 0 of 5 steps" in caplog.text
    assert (tmp_path / "alone" / "checkpoints" / "step_000001").is_dir()
    assert summary["steps"] == 1


def test_the_stop_message_names_no_step_that_is_never_trained(warm_tiny_model_dir, tmp_path, caplog):
    """A stop after the last step (Ctrl-C during the final evaluation) said "finishing step 2" in a
    1-step run; mid-run it named a step a stop in the round's wait then dropped."""
    async def scenario():
        node = await create_node(swarm_cfg(warm_tiny_model_dir, tmp_path / "done", **{"train.steps": 1}), MemoryHub())
        await node.run(handle_signals=False)
        node.request_stop()
        await node.close()

    with caplog.at_level("WARNING"):
        asyncio.run(scenario())
    assert "stop requested: training is done (1 steps); finishing up" in caplog.text
    assert "step 2" not in caplog.text


def test_a_part_of_close_that_never_finishes_is_left_behind_by_name(caplog):
    """A close waiting on an answer that never comes (a broker's, once, for a worker) must not keep
    a stopped node alive: it is cancelled after its time and said in the log."""
    import asyncio
    import logging

    from swarm_node.node.run.stopping import close_within

    cancelled = []

    async def forever():
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            cancelled.append(True)
            raise

    async def quick():
        return None

    async def failing():
        raise OSError("broker gone")

    async def go():
        assert await close_within("the swarm connection", quick(), seconds=1) is True
        assert await close_within("the weight broadcast", forever(), seconds=0.05) is False
        await asyncio.sleep(0)  # let the cancellation land
        try:
            await close_within("the swarm connection", failing(), seconds=1)
        except OSError as e:
            return str(e)

    with caplog.at_level(logging.WARNING, logger="swarm_node.node.run.trainer"):
        assert asyncio.run(go()) == "broker gone"
    assert cancelled == [True]
    assert [r.getMessage() for r in caplog.records] == [
        "closing the weight broadcast took over 0 s: left behind so the node can stop"]
