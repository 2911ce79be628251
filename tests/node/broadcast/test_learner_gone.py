"""A worker whose learner stopped, while the worker was more than max_staleness versions behind or
while it generated up to date: it notices the silence (no new version, no heartbeat of the
learner, no chunk arriving) within ``broadcast.learner_timeout``, says so naming the learner, and
stops with an error (exit 1); a learner that is heard in any of those ways keeps it going."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from types import SimpleNamespace

import pytest

from node.broadcast.context import RoleContext, RoleSettings
from node.broadcast.roles import LearnerGone, WorkerRole
from tests.helpers.wait import wait_for

LEARNER = "sn1learnerlearnerlearnerlearnerlearn"


class _Follower:
    """A follower holding version 1 while the learner announced 5 (S = 2): it must wait."""

    def __init__(self, applied: int = 1):
        self.applied, self.newest_seen, self.transfer = applied, 5, None
        self.directory = SimpleNamespace(source=LEARNER)
        self.peer = SimpleNamespace(status=lambda: {"transfer": self.transfer})

    def fresh_enough(self) -> bool:
        return self.newest_seen - self.applied <= 2


def _ctx(heard_at, phases: list, stop: list, timeout: float = 1.0) -> RoleContext:
    return RoleContext(settings=RoleSettings(max_staleness=2, learner_timeout=timeout), swarm_name="s",
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


@pytest.mark.parametrize("heard", [False, True])
def test_an_up_to_date_worker_whose_learner_went_silent_stops_too(heard):
    """Before each step (the trainer calls ``before_step`` once a step), the same clock: a worker
    holding the newest version generates while its learner is heard, and stops once the learner
    has been silent for the timeout: its rollouts would go to no one that trains on them."""
    phases: list = []
    role = _worker(applied=5)
    beats = iter(range(10 ** 6))

    async def steps() -> int:
        ctx = _ctx(lambda _p: float(next(beats)) if heard else 1000.0, phases, [], timeout=0.5)
        t0, n = time.monotonic(), 0
        while time.monotonic() - t0 < 3.0:  # steps of 0.1 s for 3 s, six timeouts
            await asyncio.wait_for(role.before_step(ctx), 10)
            n += 1
            await asyncio.sleep(0.1)
        return n

    if heard:
        assert asyncio.run(steps()) >= 10 and phases == []  # never waited: it was up to date
        return
    with pytest.raises(LearnerGone) as e:
        asyncio.run(steps())
    msg = str(e.value)
    assert f"the learner {LEARNER} (--follow) gave no sign for" in msg
    assert "generated with version 5, the newest it announced" in msg and "no one trains on" in msg
    assert phases[-1] == ("stopped", msg)
