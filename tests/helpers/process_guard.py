"""Strict process markers: a test that starts another process must say so.

Three markers name what a test starts (pyproject.toml declares them):

    daemon      hivemind's p2pd or its DHT process
    broker      a mosquitto broker (or its password tool)
    subprocess  any other process: a ``swarm-node`` node, an interpreter, a tool

so ``make test-fast`` (``-m "not slow and not daemon and not broker and not subprocess"``) is pure
in-process tests. The guard wraps ``subprocess.Popen`` (asyncio's subprocesses go through it) and
``multiprocessing``'s ``start`` for the whole session; a process started while a test (or a fixture
it uses) runs without the matching marker fails that test at teardown, naming the marker to add.
The process itself still starts: the guard changes no behaviour, it only reports.
"""

from __future__ import annotations

import multiprocessing.process
import os
import subprocess
from pathlib import Path

import pytest

KINDS = ("daemon", "broker", "subprocess")

_current: list[pytest.Item] = []  # the test whose set-up, call or teardown is running
_started: dict[str, set[tuple[str, str]]] = {}  # nodeid -> {(kind, what)} started unmarked


def kind_of_command(args) -> str:
    """Which marker a command needs: daemon (p2pd), broker (mosquitto*), else subprocess."""
    argv = [args] if isinstance(args, (str, bytes, os.PathLike)) else list(args)
    program = Path(os.fsdecode(argv[0])).name if argv else ""
    if "p2pd" in program:
        return "daemon"
    if program.startswith("mosquitto"):
        return "broker"
    return "subprocess"


def kind_of_process(process: multiprocessing.process.BaseProcess) -> str:
    return "daemon" if type(process).__module__.startswith("hivemind") else "subprocess"


def _note(kind: str, what: str) -> None:
    if not _current:
        return
    item = _current[-1]
    if item.get_closest_marker(kind) is None:
        _started.setdefault(item.nodeid, set()).add((kind, what))


def install() -> None:
    """Wrap the two ways a process starts; idempotent."""
    if getattr(subprocess.Popen.__init__, "_guarded", False):
        return
    popen_init = subprocess.Popen.__init__
    process_start = multiprocessing.process.BaseProcess.start

    def guarded_init(self, args, *a, **kw):
        argv = [args] if isinstance(args, (str, bytes, os.PathLike)) else list(args)
        _note(kind_of_command(args), " ".join(os.fsdecode(x) for x in argv[:3]))
        popen_init(self, args, *a, **kw)

    def guarded_start(self):
        _note(kind_of_process(self), type(self).__qualname__)
        process_start(self)

    guarded_init._guarded = True
    subprocess.Popen.__init__ = guarded_init
    multiprocessing.process.BaseProcess.start = guarded_start


@pytest.hookimpl(wrapper=True)
def pytest_runtest_protocol(item, nextitem):
    _current.append(item)
    try:
        return (yield)
    finally:
        _current.pop()


@pytest.hookimpl(wrapper=True)
def pytest_runtest_teardown(item, nextitem):
    result = yield
    started = _started.pop(item.nodeid, None)
    if started:
        lines = [f"  @pytest.mark.{kind}: {what}" for kind, what in sorted(started)]
        pytest.fail("this test started processes without their marker (tests/helpers/process_guard.py):\n"
                    + "\n".join(lines), pytrace=False)
    return result
