"""A worker whose learner stopped while the worker was more than max_staleness versions behind:
it notices the silence (no new version, no heartbeat of the learner, no chunk arriving) within
``broadcast.learner_timeout``, says so naming the learner, and stops with an error (exit 1); a
learner that is heard in any of those ways keeps it waiting. Up to date, the same silence gets a
warning, once, and the worker goes on."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from types import SimpleNamespace

import pytest

from swarm_node.node.run.role_context import RoleContext
from swarm_node.node.config.config import BroadcastConfig
from swarm_node.node.run.roles import LearnerGone, WorkerRole
from tests.helpers.wait import wait_for

LEARNER = "sn1learnerlearnerlearnerlearnerlearn"


class _Follower:
    """A follower holding version 1 while the learner announced 5 (S = 2): it must wait."""

    def __init__(self, applied: int = 1):
        self.applied, self.newest_seen, self.transfer, self.heard = applied, 5, None, True
        self.directory = SimpleNamespace(source=LEARNER)
        self.peer = SimpleNamespace(status=lambda: {"transfer": self.transfer})

    def fresh_enough(self) -> bool:
        return self.newest_seen - self.applied <= 2


def _ctx(heard_at, phases: list, stop: list, timeout: float = 1.0) -> RoleContext:
    return RoleContext(settings=BroadcastConfig(max_staleness=2, learner_timeout=timeout), swarm_name="s",
                       run_dir=Path("."), policy=None, transport=None, identity=None, learner_version=lambda: 0,
                       step=lambda: 0, stop_requested=lambda: bool(stop),
                       set_phase=lambda name, detail="": phases.append((name, detail)), heard_at=heard_at)


def _worker(applied: int = 1) -> WorkerRole:
    role = WorkerRole()
    role.follower = _Follower(applied)
    return role


def test_a_worker_whose_learner_went_silent_stops_naming_it():
    phases: list = []
    role = _worker()
    t0 = time.monotonic()

    async def go():
        await asyncio.wait_for(role.before_step(_ctx(lambda _p: 1000.0, phases, [])), 30)

    with pytest.raises(LearnerGone) as e:
        asyncio.run(go())
    took = time.monotonic() - t0
    assert 1.0 <= took < 10, took  # the timeout, and not much more
    msg = str(e.value)
    assert f"the learner {LEARNER} (--follow) gave no sign for" in msg
    assert "version 1 applied, the learner announced 5" in msg and "--broadcast.learner_timeout" in msg
    assert phases[-1] == ("stopped", msg)  # status.json says it too


@pytest.mark.parametrize("alive", ["heartbeat", "chunks", "versions"])
def test_a_learner_heard_in_any_way_keeps_its_worker_waiting(alive):
    phases: list = []
    stop: list = []
    role = _worker()
    f = role.follower
    beats = iter(range(10 ** 6))

    def heard_at(_peer):
        return float(next(beats)) if alive == "heartbeat" else 1000.0

    def on_phase(name, detail=""):  # each wait loop: the learner shows a sign the worker can see
        phases.append((name, detail))
        if alive == "chunks":
            f.transfer = {"version": 5, "bytes": len(phases) * 1000, "total": 10 ** 9}
        elif alive == "versions":
            f.newest_seen = 5 + len(phases)
            f.applied = f.newest_seen - 4

    async def go():
        ctx = _ctx(heard_at, phases, stop, timeout=0.5)
        ctx = RoleContext(**{**ctx.__dict__, "set_phase": on_phase})
        t0 = time.monotonic()
        waiting = asyncio.ensure_future(role.before_step(ctx))
        await wait_for(lambda: waiting.done() or time.monotonic() - t0 > 2.0, 30)
        still = not waiting.done()
        stop.append(True)
        await asyncio.wait_for(waiting, 10)  # a stop ends the wait at once, without an error
        return still

    assert asyncio.run(go()), "the worker stopped waiting though its learner was heard"
    assert phases[-1][0] == "waiting for the learner's weights"


def test_while_the_workers_own_link_is_down_the_learners_silence_is_not_counted():
    """The worker's swarm link is down (rejoining): it hears no heartbeat of anyone, which says
    nothing about its learner. It keeps waiting through an outage longer than the timeout, and
    the clock starts again when the link is back."""
    phases: list = []
    stop: list = []
    role = _worker()
    up = [False]

    async def go():
        ctx = RoleContext(**{**_ctx(lambda _p: 1000.0, phases, stop, timeout=0.5).__dict__,
                             "link_up": lambda: up[0]})
        waiting = asyncio.ensure_future(role.before_step(ctx))
        t0 = time.monotonic()
        await wait_for(lambda: waiting.done() or time.monotonic() - t0 > 1.5, 30)  # three timeouts, link down
        survived = not waiting.done()
        up[0] = True
        t1 = time.monotonic()
        with pytest.raises(LearnerGone):
            await asyncio.wait_for(waiting, 10)
        return survived, time.monotonic() - t1

    survived, after = asyncio.run(go())
    assert survived, "the worker blamed its learner for its own outage"
    assert after >= 0.5  # a whole timeout from the link's return


def test_a_timeout_of_zero_waits_for_ever_as_before():
    stop: list = []
    role = _worker()
    phases: list = []

    async def go():
        waiting = asyncio.ensure_future(role.before_step(_ctx(lambda _p: None, phases, stop, timeout=0)))
        await wait_for(lambda: len(phases) >= 10, 30)  # about 2 s of waiting, silent throughout
        done = waiting.done()
        stop.append(True)
        await asyncio.wait_for(waiting, 10)
        return done

    assert not asyncio.run(go())


def test_an_up_to_date_worker_warns_of_a_silent_learner_once_and_goes_on(caplog):
    """Before each step (the trainer calls ``before_step`` once a step) the same clock: a worker
    holding the newest version is never stopped by silence (a learner evaluating or checkpointing
    is silent too), but says so once per silence, and again after the learner's next sign."""
    phases: list = []
    role = _worker(applied=5)
    heard = [1000.0]

    async def steps(seconds: float) -> int:
        ctx = _ctx(lambda _p: heard[0], phases, [], timeout=0.3)
        t0, n = time.monotonic(), 0
        while time.monotonic() - t0 < seconds:
            await asyncio.wait_for(role.before_step(ctx), 10)  # returns at once: up to date
            n += 1
            await asyncio.sleep(0.05)
        return n

    with caplog.at_level("WARNING", logger="swarm_node.node.broadcast.roles"):
        assert asyncio.run(steps(1.0)) >= 5
        said = [r.getMessage() for r in caplog.records]
        heard[0] = 2000.0  # a heartbeat: the learner is back, then silent again
        asyncio.run(steps(1.0))
    assert len(said) == 1 and f"the learner {LEARNER} (--follow) gave no sign for" in said[0]
    assert "goes on generating with version 5" in said[0]
    assert len(caplog.records) == 2 and phases == []  # said again after the sign; never waited, never stopped
