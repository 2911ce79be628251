"""The local model cache: folders under ``$SWARM_NODE_HOME/models/`` built once, whole or not at all.

Every model the node makes for itself (the embedded default, a registry model de-quantized from
its GGUF, a user's GGUF converted to a plain folder) lands here through ``cached_build``:

* a folder counts only once its ``BUILD_OK`` marker exists, and it is moved into place with one
  ``os.replace`` after the marker is written, so a build killed half-way (Ctrl-C, SIGKILL, a full
  disk, a failed download) leaves no folder that looks finished;
* processes that start at once (a simulated swarm, a user's second node) build it once: the first
  takes an exclusive lock and builds, the others wait on the lock and reuse the result;
* whoever holds the lock removes the leftovers of builds that were killed.
"""

from __future__ import annotations

import contextlib
import fcntl
import logging
import os
import shutil
from pathlib import Path
from typing import Callable

from swarm_node.policies.errors import ModelSourceError

log = logging.getLogger(__name__)

__all__ = ["BUILD_OK", "default_home", "models_root", "cached_build", "is_built"]

BUILD_OK = "BUILD_OK"


def default_home() -> Path:
    return Path(os.environ.get("SWARM_NODE_HOME", Path.home() / ".cache" / "swarm-node"))


def models_root(home: Path | None = None) -> Path:
    return (home or default_home()) / "models"


def is_built(folder: Path) -> bool:
    return (folder / BUILD_OK).exists()


def cached_build(final: Path, build: Callable[[Path], str], *, what: str,
                 progress: Callable[[str], None] | None = None) -> Path:
    """``final``, built first if missing: ``build(tmp)`` fills a fresh folder beside it and returns
    the text of its ``BUILD_OK`` marker (what it was built from). Anything ``build`` raises leaves
    nothing behind and propagates."""
    if is_built(final):
        return final
    root = final.parent
    root.mkdir(parents=True, exist_ok=True)
    with _build_lock(root / f".{final.name}.lock", what, progress):
        if is_built(final):  # another process built it while we waited
            return final
        for stale in root.glob(f".{final.name}.tmp-*"):  # a build that was killed (we hold the lock)
            shutil.rmtree(stale, ignore_errors=True)
        tmp = root / f".{final.name}.tmp-{os.getpid()}"
        tmp.mkdir()
        try:
            marker = build(tmp)
            (tmp / BUILD_OK).write_text(marker)
            if final.is_dir() and not final.is_symlink():  # a folder without its marker: unfinished
                shutil.rmtree(final)
            elif final.exists() or final.is_symlink():
                final.unlink()
            os.replace(tmp, final)
        except OSError as e:  # a full disk, a folder it may not write: what, where, and nothing kept
            raise ModelSourceError(f"building {what} in {root} failed: {e.strerror or e} "
                                   f"({getattr(e, 'filename', '') or root}); nothing was kept") from e
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
    return final


@contextlib.contextmanager
def _build_lock(path: Path, what: str, progress: Callable[[str], None] | None):
    with open(path, "a+b") as f:
        try:
            fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            log.info("another process is building %s; waiting for it", what)
            if progress is not None:
                progress("waiting for another process that is building it")
            fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)
