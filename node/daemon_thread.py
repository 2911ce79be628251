"""Blocking start-up work (building or loading a model) that a Ctrl-C must be able to abandon.

asyncio's own executor (``asyncio.to_thread``) joins its threads when the process exits, so a
Ctrl-C during a 30-second model build would hold the process until the build finished. A daemon
thread is not joined: the interrupted process exits at once, and what the work left half-done is
made safe by whoever owns it (the default model builds into a temporary folder).
"""

from __future__ import annotations

import asyncio
import logging
import os
import sys
import threading

__all__ = ["run_in_daemon_thread", "work_abandoned", "exit_if_work_abandoned"]

_abandoned: set[threading.Thread] = set()  # threads whose awaiting task was cancelled (Ctrl-C)


async def run_in_daemon_thread(fn, *args):
    """``fn(*args)`` in a daemon thread: blocking start-up work (building or loading a model)
    that a Ctrl-C must be able to abandon. asyncio's own executor joins its threads at exit, so
    an interrupted load would hold the process until the model had finished loading."""
    loop = asyncio.get_running_loop()
    fut = loop.create_future()

    def deliver(ok: bool, value) -> None:
        if not fut.done():
            fut.set_result(value) if ok else fut.set_exception(value)

    def work() -> None:
        try:
            out = (True, fn(*args))
        except BaseException as e:  # handed to the awaiting task, which re-raises it
            out = (False, e)
        try:
            loop.call_soon_threadsafe(deliver, *out)
        except RuntimeError:  # the loop is gone: nobody waits for this any more
            pass

    thread = threading.Thread(target=work, name=f"swarm-node-{getattr(fn, '__name__', 'work')}", daemon=True)
    thread.start()
    try:
        return await fut
    except asyncio.CancelledError:  # nobody will wait for this thread's result any more
        _abandoned.add(thread)
        raise


def work_abandoned() -> bool:
    """Whether a thread whose result nobody awaits any more is still running."""
    return any(t.is_alive() for t in _abandoned)


def exit_if_work_abandoned(code: int) -> None:
    """End the process with ``code`` now if abandoned work is still running.

    Letting the interpreter finalize while a daemon thread is inside native code (torch,
    tokenizers) aborts the process ("FATAL: exception not rethrown", SIGABRT). The caller has
    closed everything it owns; what the thread was writing is in a temporary folder.
    """
    if work_abandoned():
        logging.shutdown()
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)
