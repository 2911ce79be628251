"""A run's checkpoint folder, crash-safe, so a restarted node resumes exactly where it stopped:
publishing a new checkpoint atomically, keeping the newest valid ones, cleaning what killed
saves left, and finding the checkpoint a resume loads.

``<ckpt_root>/step_000123/`` holds one checkpoint (its files: node/checkpoint/checkpoint_format.py).
A checkpoint is built in ``step_000123.tmp-<pid>``, fsynced, then renamed into place, so a
``step_*`` directory is either complete or absent even if the process is SIGKILLed. Renames are
also used to retire old directories (``.old-<pid>``, ``.del-<pid>``), and leftovers of dead
processes are cleaned at the next save. One saver per checkpoint root at a time.
"""

from __future__ import annotations

import json
import logging
import os
import re
import shutil
import time
from pathlib import Path

from swarm_node.node.errors import CheckpointError, CheckpointFormatError
from swarm_node.node.checkpoint.checkpoint_format import (
    MANIFEST_FILE, CheckpointState, forget_verified, fsync_path, load_checkpoint, verify_cached, write_files,
)

__all__ = [
    "save_checkpoint", "load_checkpoint", "list_checkpoints", "newest_valid", "checkpoint_step", "load_latest",
]

logger = logging.getLogger("swarm_node.node.run.checkpoint")  # the log name before the split: filters select it

LATEST_FILE = "latest"
_FINAL_RE = re.compile(r"^step_(\d+)$")
_SIDECAR_RE = re.compile(r"^(?P<base>.+)\.(?P<kind>tmp|old|del)-(?P<pid>\d+)$")


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # exists, owned by another user
        pass
    return True


def _step_dirs(root: Path) -> list[tuple[int, Path]]:
    """All final-named step directories (complete or not), ascending by step."""
    if not root.is_dir():
        return []
    found = [(int(m.group(1)), p) for p in root.iterdir()
             if (m := _FINAL_RE.match(p.name)) and p.is_dir()]
    return sorted(found)


def _clean_leftovers(root: Path) -> None:
    """Remove what killed (or earlier failed) saves left behind; restore an orphaned .old dir."""
    me = os.getpid()
    for p in root.iterdir():
        m = _SIDECAR_RE.match(p.name)
        if m is None or (int(m.group("pid")) != me and _pid_alive(int(m.group("pid")))):
            continue
        final = root / m.group("base")
        if m.group("kind") == "old" and not final.exists():
            # Killed between moving the old copy aside and renaming the new one in: keep the old.
            logger.warning("restoring %s from leftover %s", final.name, p.name)
            os.replace(p, final)
            continue
        logger.info("removing leftover %s of an interrupted checkpoint operation", p.name)
        if p.is_dir():
            shutil.rmtree(p)
        else:  # latest.tmp-<pid>
            p.unlink()


def save_checkpoint(ckpt_root: Path, state: CheckpointState, keep_last: int = 3) -> Path:
    """Write ``state`` atomically to ``ckpt_root/step_<step>``, prune to ``keep_last``; return the dir."""
    if keep_last < 1:
        raise ValueError(f"keep_last must be >= 1, got {keep_last}")
    if isinstance(state.step, bool) or not isinstance(state.step, int) or state.step < 0:
        raise CheckpointError(f"step must be a non-negative int, got {state.step!r}")
    try:  # fail before writing gigabytes, not after
        json.dumps(state.extra)
    except (TypeError, ValueError) as e:
        raise CheckpointError(f"checkpoint extra is not JSON-serializable: {e}") from e
    started = time.monotonic()
    root = Path(ckpt_root)
    root.mkdir(parents=True, exist_ok=True)
    _clean_leftovers(root)
    name = f"step_{state.step:06d}"
    final, tmp = root / name, root / f"{name}.tmp-{os.getpid()}"
    try:
        write_files(tmp, state)
        _publish(tmp, final)
    finally:
        if tmp.exists():  # failed before the rename: never leave a half-written dir behind
            shutil.rmtree(tmp, ignore_errors=True)
    latest_tmp = root / f"{LATEST_FILE}.tmp-{os.getpid()}"
    latest_tmp.write_text(name + "\n", encoding="utf-8")
    os.replace(latest_tmp, root / LATEST_FILE)
    _prune(root, keep_last, final)
    logger.info("saved checkpoint %s in %.2fs", final, time.monotonic() - started)
    return final


def _publish(tmp: Path, final: Path) -> None:
    """Rename ``tmp`` to ``final``; an existing ``final`` (re-saved step) is moved aside first."""
    aside = None
    if final.exists():
        # os.replace cannot overwrite a non-empty directory.
        aside = final.with_name(f"{final.name}.old-{os.getpid()}")
        os.replace(final, aside)
    published = False
    try:
        os.replace(tmp, final)
        published = True
    finally:
        if aside is not None and not published:
            os.replace(aside, final)
    fsync_path(final.parent)  # the rename itself must survive a power loss
    if aside is not None:
        shutil.rmtree(aside)


def _prune(root: Path, keep_last: int, just_written: Path) -> None:
    """Keep the ``keep_last`` newest *valid* checkpoints (``just_written`` always among them).

    A corrupt or incomplete checkpoint never takes a slot: if it did, a corrupt newest one would
    push the last good one out (resume would then have nothing to fall back to). Corrupt ones
    are removed, with the reason logged, since resume skips them anyway.
    """
    valid, broken = [], []
    for _, p in _step_dirs(root):
        if p == just_written:
            valid.append(p)
            continue
        try:
            verify_cached(p)
            valid.append(p)
        except CheckpointFormatError as e:  # another version's: not ours to judge or delete
            logger.warning("keeping checkpoint %s, which this version cannot read: %s", p.name, e)
        except CheckpointError as e:
            broken.append((p, e))
        except OSError as e:  # unreadable now (permissions, I/O): neither counted nor deleted
            logger.warning("keeping checkpoint %s, which could not be read to verify it: %s", p.name, e)
    keep = set(valid[-keep_last:]) | {just_written}
    doomed_dirs = [p for p in valid if p not in keep]
    for p, e in broken:
        logger.warning("removing unusable checkpoint %s: %s", p.name, e)
        doomed_dirs.append(p)
    for p in doomed_dirs:
        # Rename first so a kill mid-delete never leaves a half-deleted step_* dir visible.
        doomed = p.with_name(f"{p.name}.del-{os.getpid()}")
        os.replace(p, doomed)
        shutil.rmtree(doomed)
        forget_verified(p)
        logger.debug("pruned checkpoint %s", p.name)


def list_checkpoints(ckpt_root: Path) -> list[Path]:
    """Complete (MANIFEST present, not verified) checkpoint dirs, ascending by step."""
    return [p for _, p in _step_dirs(Path(ckpt_root)) if (p / MANIFEST_FILE).is_file()]


def newest_valid(ckpt_root: Path) -> Path | None:
    """The checkpoint a resume would load: the newest whose files verify against its manifest
    (hashes checked, tensors not loaded), or None. Corrupt ones are skipped, as ``load_latest``
    skips them."""
    for _, path in reversed(_step_dirs(Path(ckpt_root))):
        try:
            verify_cached(path)
            return path
        except (CheckpointError, OSError):
            continue
    return None


def checkpoint_step(path: Path) -> int:
    """The step in a checkpoint directory's name (``step_000123`` -> 123)."""
    m = _FINAL_RE.match(Path(path).name)
    if m is None:
        raise ValueError(f"{path} is not a checkpoint directory name")
    return int(m.group(1))


def load_latest(ckpt_root: Path) -> tuple[CheckpointState, Path] | None:
    """Newest checkpoint that verifies, falling back past corrupt ones; None if there are none."""
    if Path(ckpt_root).is_dir():
        # A save killed mid re-publish leaves the good copy aside as .old-<pid>: put it back first.
        _clean_leftovers(Path(ckpt_root))
    failures = []
    for _, path in reversed(_step_dirs(Path(ckpt_root))):
        try:
            return load_checkpoint(path), path
        except CheckpointError as e:
            logger.warning("skipping checkpoint %s: %s", path.name, e)
            failures.append(f"{path.name}: {e}")
    if failures:
        raise CheckpointError("no usable checkpoint in %s:\n  %s" % (ckpt_root, "\n  ".join(failures)))
    return None
