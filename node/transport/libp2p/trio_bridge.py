"""The one door between the node's asyncio loop and py-libp2p's trio world.

py-libp2p runs on trio (an asyncio bridge was declined upstream), and the node is asyncio
throughout. ``TrioThread`` runs one trio event loop in its own daemon thread for the life of the
transport; everything libp2p does happens there, and the two sides talk only through this class:

- ``call(fn, *args)`` (asyncio side): run the trio coroutine function ``fn`` in the trio thread
  and await its result; cancelling the awaiting task cancels the trio task.
- ``spawn(fn, *args)``: a background trio task (a subscription reader), ended by ``stop``.
- ``to_loop(cb, *args)`` (trio side): call ``cb`` on the asyncio loop soon, thread-safely.
- ``await_loop(coro_fn, *args)`` (trio side): run an asyncio coroutine on the loop and await it
  from trio (a stream handler whose logic is the node's asyncio code).

A daemon thread (not guest mode) so CPU work on either side (noise handshakes, gossip
validation) never blocks the other's timers, and an interrupted process exits at once.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from typing import Any, Awaitable, Callable

import trio

log = logging.getLogger(__name__)

__all__ = ["TrioThread", "BridgeClosed"]


class BridgeClosed(ConnectionError):
    """The trio thread has stopped (or never started): nothing more can run in it."""


def _deliver(fut: asyncio.Future, ok: bool, value: Any) -> None:
    if not fut.done():
        fut.set_result(value) if ok else fut.set_exception(value)


class _Call:
    __slots__ = ("scope", "cancelled")

    def __init__(self):
        self.scope: trio.CancelScope | None = None
        self.cancelled = False

    def cancel(self) -> None:  # on the trio thread
        self.cancelled = True
        if self.scope is not None:
            self.scope.cancel()


class TrioThread:
    def __init__(self, name: str = "libp2p"):
        self.name = name
        self._loop: asyncio.AbstractEventLoop | None = None
        self._token: trio.lowlevel.TrioToken | None = None
        self._nursery: trio.Nursery | None = None
        self._thread: threading.Thread | None = None
        self._ended: asyncio.Future | None = None
        self.error: BaseException | None = None  # what ended the trio run, if not stop()

    # -- lifecycle (asyncio side) -----------------------------------------------------------------
    async def start(self) -> None:
        self._loop = asyncio.get_running_loop()
        ready = self._loop.create_future()
        self._ended = self._loop.create_future()

        async def main() -> None:
            async with trio.open_nursery() as nursery:
                self._token, self._nursery = trio.lowlevel.current_trio_token(), nursery
                self._post(_deliver, ready, True, None)
                await trio.sleep_forever()

        def run() -> None:
            try:
                trio.run(main)
            except BaseException as e:  # noqa: BLE001 - handed to whoever waits
                self.error = e
                log.error("the %s trio thread ended: %r", self.name, e)
                self._post(_deliver, ready, False, BridgeClosed(f"the {self.name} thread failed: {e!r}"))
            finally:
                self._token = None
                self._post(_deliver, self._ended, True, None)

        self._thread = threading.Thread(target=run, name=f"{self.name}-trio", daemon=True)
        self._thread.start()
        await ready

    @property
    def nursery(self) -> trio.Nursery:
        """(trio side) the thread's nursery: tasks that live as long as the bridge."""
        return self._nursery

    def alive(self) -> bool:
        return self._token is not None and self._thread is not None and self._thread.is_alive()

    async def stop(self, timeout: float = 5.0) -> None:
        """Cancel everything running in the trio thread and wait (at most ``timeout``) for it to end."""
        if self._thread is None:
            return
        try:
            self._run_soon(lambda: self._nursery.cancel_scope.cancel())
        except BridgeClosed:
            pass
        try:
            await asyncio.wait_for(asyncio.shield(self._ended), timeout)
        except asyncio.TimeoutError:
            log.warning("the %s trio thread did not stop within %g s; leaving it (a daemon thread)", self.name, timeout)
        self._thread = None

    # -- asyncio -> trio ----------------------------------------------------------------------------
    def _run_soon(self, fn: Callable[[], None]) -> None:
        token = self._token
        if token is None:
            raise BridgeClosed(f"the {self.name} thread is not running")
        try:
            token.run_sync_soon(fn)
        except trio.RunFinishedError:
            raise BridgeClosed(f"the {self.name} thread has stopped") from None

    async def call(self, fn: Callable[..., Awaitable[Any]], *args) -> Any:
        """``await fn(*args)`` in the trio thread; its result or exception comes back here."""
        fut = self._loop.create_future()
        call = _Call()

        async def runner() -> None:
            if call.cancelled:
                return
            with trio.CancelScope() as scope:
                call.scope = scope
                try:
                    value = await fn(*args)
                except trio.Cancelled:
                    self._post(_deliver, fut, False, BridgeClosed(f"{getattr(fn, '__name__', fn)} cancelled in the {self.name} thread"))
                    raise
                except Exception as e:  # noqa: BLE001 - re-raised on the asyncio side
                    self._post(_deliver, fut, False, e)
                    return
                self._post(_deliver, fut, True, value)
            if scope.cancelled_caught:
                self._post(_deliver, fut, False, BridgeClosed(f"{getattr(fn, '__name__', fn)} cancelled"))

        self._run_soon(lambda: self._nursery.start_soon(runner))
        try:
            return await fut
        except asyncio.CancelledError:
            try:
                self._run_soon(call.cancel)
            except BridgeClosed:
                pass
            raise

    def spawn(self, fn: Callable[..., Awaitable[Any]], *args) -> None:
        """Run ``fn(*args)`` in the trio thread in the background (errors are logged)."""

        async def runner() -> None:
            try:
                await fn(*args)
            except Exception:  # noqa: BLE001 - a background task must not end the trio run
                log.exception("%s background task %s failed", self.name, getattr(fn, "__name__", fn))

        self._run_soon(lambda: self._nursery.start_soon(runner))

    # -- trio -> asyncio ----------------------------------------------------------------------------
    def _post(self, cb: Callable[..., None], *args) -> None:
        try:
            self._loop.call_soon_threadsafe(cb, *args)
        except RuntimeError:  # the loop is closed: nobody waits any more
            pass

    def to_loop(self, cb: Callable[..., None], *args) -> None:
        """(trio side) ``cb(*args)`` on the asyncio loop, soon."""
        self._post(cb, *args)

    async def await_loop(self, coro_fn: Callable[..., Awaitable[Any]], *args) -> Any:
        """(trio side) run ``coro_fn(*args)`` as an asyncio task and await it here; a trio
        cancellation cancels the task."""
        done = trio.Event()
        box: dict = {}
        token = trio.lowlevel.current_trio_token()

        def finished(task: asyncio.Task) -> None:
            box["task"] = task
            try:
                token.run_sync_soon(done.set)
            except trio.RunFinishedError:
                pass

        def begin() -> None:
            task = self._loop.create_task(coro_fn(*args))
            box["started"] = task
            task.add_done_callback(finished)

        self._post(begin)
        try:
            await done.wait()
        except trio.Cancelled:
            task = box.get("started")
            if task is not None:
                self._post(task.cancel)
            raise
        task = box["task"]
        if task.cancelled():
            raise BridgeClosed("the asyncio side cancelled the task")
        return task.result()
