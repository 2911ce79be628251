"""One process per run folder: a node holds an exclusive lock on ``RUN/.lock`` from its start to
its close, so a second ``train`` or ``join`` with the same ``--run.dir`` stops at once, naming the
process that owns the folder, instead of both writing checkpoints and metrics into it. The same
lock keeps one ``swarm-node bootstrap`` per key (``hold``): a second one on another port would
otherwise run under the first one's peer id.

The lock is the kernel's (``flock``): it goes with the process, however that process ends, so a
lock file left by a killed node is not a lock at all and the next start takes it. The file says
who holds it (pid, host, command, start time) for the message; its content is never trusted to
decide anything.
"""

from __future__ import annotations

import fcntl
import json
import os
import socket
import sys
import time
from pathlib import Path
from typing import Callable

from swarm_node.node.errors import ConfigError

__all__ = ["RunLock", "LOCK_FILE"]

LOCK_FILE = ".lock"


class RunLock:
    """The held lock of one run folder; ``release`` (or the process's end) frees it."""

    def __init__(self, path: Path, fd: int):
        self.path, self._fd = path, fd

    @classmethod
    def acquire(cls, run_dir: Path) -> "RunLock":
        return cls.hold(Path(run_dir) / LOCK_FILE, lambda holder: (
            f"run folder {run_dir} is in use by {holder}: one node per run folder; stop it first, or choose "
            f"another --run.dir"))

    @classmethod
    def hold(cls, path: Path, busy: Callable[[str], str]) -> "RunLock":
        """The lock at ``path``; a ``ConfigError`` with ``busy(holder)`` when a process holds it."""
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = _holder(fd)
            os.close(fd)
            raise ConfigError(busy(holder)) from None
        except BaseException:
            os.close(fd)
            raise
        me = {"pid": os.getpid(), "host": socket.gethostname(), "since": time.time(),
              "command": " ".join(os.path.basename(a) if i == 0 else a for i, a in enumerate(sys.argv))[:300]}
        os.ftruncate(fd, 0)
        os.pwrite(fd, json.dumps(me).encode(), 0)
        return cls(path, fd)

    def release(self) -> None:
        if self._fd is not None:
            try:
                os.ftruncate(self._fd, 0)  # a reader no longer sees a holder
            finally:
                os.close(self._fd)  # closing the descriptor drops the flock
                self._fd = None


def _holder(fd: int) -> str:
    """Who holds the lock, as its file says (best effort: it may be mid-write)."""
    try:
        data = json.loads(os.pread(fd, 4096, 0) or b"{}")
        since = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(float(data["since"])))
        return f"process {int(data['pid'])} on {data['host']} (`{data['command']}`, started {since})"
    except (ValueError, KeyError, TypeError, OSError):
        return "another process"
