"""The processes ``swarm-node sim`` owns: start them, kill one, stop them all in order.

Every child runs in its own session (so a terminal's Ctrl-C reaches the simulator alone, which
then stops the nodes in order: SIGTERM, each checkpoints, SIGKILL after a grace period, or at
once when the user asks a second time: ``hurry``) and is
told by the kernel to exit if the simulator dies (``PR_SET_PDEATHSIG``): no orphans, even after
``kill -9`` of the simulator.
"""

from __future__ import annotations

import ctypes
import logging
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

log = logging.getLogger(__name__)

GRACE_S = 30.0  # how long a node may take to checkpoint and exit after SIGTERM
_PR_SET_PDEATHSIG = 1

try:  # resolved here, in the parent: the child between fork and exec must not load libraries
    _prctl = ctypes.CDLL("libc.so.6", use_errno=True).prctl
except (OSError, AttributeError):  # not Linux: the sessions and the simulator's own cleanup still apply
    _prctl = None


def die_with_parent() -> None:  # runs in the child between fork and exec
    if _prctl is not None:
        _prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)


class Children:
    """The processes the simulator owns."""

    def __init__(self) -> None:
        self.procs: list[tuple[str, subprocess.Popen]] = []
        self.started: dict[int, float] = {}  # id(proc) -> launch time
        self.killed: set[int] = set()  # id(proc) of processes killed on purpose (faults, a hurried stop)
        self.terminated = False  # the simulator has sent SIGTERM to stop the run
        self._hurry = threading.Event()  # a second Ctrl-C or SIGTERM: no more grace, SIGKILL what is left

    def spawn(self, name: str, args: list[str], log_path: Path) -> subprocess.Popen:
        env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONUNBUFFERED="1")
        # The children share the simulator's working directory, so relative paths mean the same.
        with log_path.open("ab") as f:
            p = subprocess.Popen([sys.executable, "-m", "swarm_node.node.cli", *args], stdout=f, stderr=subprocess.STDOUT,
                                 stdin=subprocess.DEVNULL, env=env, start_new_session=True,
                                 preexec_fn=die_with_parent)
        self.procs.append((name, p))
        self.started[id(p)] = time.time()
        return p

    @staticmethod
    def _kill_group(p: subprocess.Popen) -> None:
        # Each child leads its own session: the group holds its p2p daemon too, which would
        # otherwise outlive a kill -9 (and keep the p2p identity busy for a restart).
        try:
            os.killpg(p.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            p.kill()
        p.wait()

    def kill(self, name: str) -> bool:
        """kill -9 the live process called ``name`` (and its daemon); False if none was alive."""
        for n, p in self.procs:
            if n == name and p.poll() is None:
                self._kill_group(p)
                self.killed.add(id(p))
                return True
        return False

    def signal_all(self, sig: int, names: set[str] | None = None) -> None:
        for name, p in self.procs:
            if p.poll() is None and (names is None or name in names):
                try:
                    p.send_signal(sig)
                except ProcessLookupError:
                    pass

    def hurry(self) -> None:
        """End a ``stop`` under way now (from any thread): what has not exited yet is killed, and
        counts as killed on purpose."""
        self._hurry.set()

    def stop(self, grace: float = GRACE_S) -> None:
        """Nodes first (they checkpoint on SIGTERM), then the bootstrap; SIGKILL what lingers
        after ``grace`` seconds, or at once after ``hurry``."""
        nodes = {n for n, _ in self.procs if n != "bootstrap"}
        self.terminated = True
        for group in (nodes, {"bootstrap"}):
            self.signal_all(signal.SIGTERM, group)
            deadline = time.time() + grace
            for name, p in self.procs:
                if name not in group:
                    continue
                while p.poll() is None and time.time() < deadline and not self._hurry.is_set():
                    self._hurry.wait(0.1)
                if p.poll() is None:
                    if self._hurry.is_set():
                        log.warning("%s: stopping now (asked twice): killing it", name)
                        self.killed.add(id(p))
                    else:
                        log.warning("%s did not stop in %.0f s: killing it", name, grace)
                    self._kill_group(p)

    def current(self, name: str) -> subprocess.Popen | None:
        """The newest process started under ``name`` (a restarted node's replacement)."""
        return next((p for n, p in reversed(self.procs) if n == name), None)

    def alive(self) -> list[str]:
        return [n for n, p in self.procs if p.poll() is None]
