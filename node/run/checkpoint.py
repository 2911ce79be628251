"""Crash-safe checkpoints of a training node, so a restarted node resumes exactly where it stopped.

Layout of ``<ckpt_root>/step_000123/`` (tensors in safetensors, structure in JSON)::

    model.safetensors      trainable model state (tied/shared tensors saved as separate copies)
    optimizer.safetensors  every tensor of optimizer.state_dict(), keyed "state.<idx>.<name>"
    rng.safetensors        torch CPU (and CUDA, when present) generator states
    state.json             step, policy_version, saved_at, extra, optimizer structure, py/np RNG
    MANIFEST.json          written last: sha256 + size of every other file, format version

A checkpoint is built in ``step_000123.tmp-<pid>``, fsynced, then renamed into place, so a
``step_*`` directory is either complete or absent even if the process is SIGKILLed. Renames are
also used to retire old directories (``.old-<pid>``, ``.del-<pid>``), and leftovers of dead
processes are cleaned at the next save. One saver per checkpoint root at a time.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import random
import re
import shutil
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
from safetensors import SafetensorError
from safetensors.torch import load_file, save_file

from node.errors import CheckpointError, CheckpointFormatError
from policies.weight_state import tensors_for_save as _for_save  # one rule for tied weights

__all__ = [
    "FORMAT_VERSION", "CheckpointState", "RngState", "capture_rng", "restore_rng",
    "save_checkpoint", "load_checkpoint", "list_checkpoints", "newest_valid", "checkpoint_step", "load_latest",
]

logger = logging.getLogger(__name__)

FORMAT_VERSION = 1
MODEL_FILE, OPTIM_FILE, RNG_FILE = "model.safetensors", "optimizer.safetensors", "rng.safetensors"
STATE_FILE, MANIFEST_FILE, LATEST_FILE = "state.json", "MANIFEST.json", "latest"
_FINAL_RE = re.compile(r"^step_(\d+)$")
_SIDECAR_RE = re.compile(r"^(?P<base>.+)\.(?P<kind>tmp|old|del)-(?P<pid>\d+)$")
# Tags of the JSON encoding of optimizer state: tensors, tuples and non-str-keyed dicts.
_T_TENSOR, _T_TUPLE, _T_ITEMS = "__tensor__", "__tuple__", "__items__"


@dataclass(frozen=True)
class RngState:
    """Global generator states: restoring them makes the next draws identical."""

    torch_cpu: torch.Tensor  # uint8 ByteTensor from torch.get_rng_state()
    python: tuple  # random.getstate()
    numpy: tuple  # np.random.get_state() (legacy tuple form)
    torch_cuda: tuple[torch.Tensor, ...] = ()  # one per visible GPU; empty on CPU-only nodes


@dataclass(frozen=True)
class CheckpointState:
    """Everything needed to resume training; ``saved_at`` is filled on load, ignored on save."""

    step: int
    policy_version: int
    model_state: dict[str, torch.Tensor]
    optimizer_state: dict | None = None
    rng: RngState | None = None
    extra: dict = field(default_factory=dict)
    saved_at: float | None = None


def capture_rng() -> RngState:
    cuda = tuple(torch.cuda.get_rng_state_all()) if torch.cuda.is_available() else ()
    return RngState(torch.get_rng_state(), random.getstate(), np.random.get_state(), cuda)


def restore_rng(rng: RngState) -> None:
    torch.set_rng_state(rng.torch_cpu)
    random.setstate(rng.python)
    np.random.set_state(rng.numpy)
    if rng.torch_cuda:
        # A resume on a machine with another GPU count cannot be exact; CPU streams still are.
        if torch.cuda.is_available() and torch.cuda.device_count() == len(rng.torch_cuda):
            torch.cuda.set_rng_state_all(list(rng.torch_cuda))
        else:
            logger.warning("checkpoint has %d CUDA RNG states but this machine cannot restore "
                           "them; GPU random streams will differ", len(rng.torch_cuda))


def _encode(obj: Any, path: str, tensors: dict[str, torch.Tensor]) -> Any:
    """JSON form of a state_dict-like tree; tensors go to ``tensors`` under their dotted path."""
    if isinstance(obj, torch.Tensor):
        key = path if path not in tensors else f"{path}#{len(tensors)}"
        tensors[key] = obj
        return {_T_TENSOR: key}
    if obj is None or isinstance(obj, (bool, int, float, str)):
        return obj
    if isinstance(obj, (list, tuple)):
        items = [_encode(v, f"{path}.{i}", tensors) for i, v in enumerate(obj)]
        return {_T_TUPLE: items} if isinstance(obj, tuple) else items
    if isinstance(obj, dict):
        if all(isinstance(k, str) and not k.startswith("__") for k in obj):
            return {k: _encode(v, f"{path}.{k}" if path else k, tensors) for k, v in obj.items()}
        if not all(isinstance(k, (str, int)) for k in obj):
            raise CheckpointError(f"optimizer state at {path!r} has keys that are not str/int")
        # Param-index keys are ints; plain JSON would turn them into strings.
        return {_T_ITEMS: [[k, _encode(v, f"{path}.{k}" if path else str(k), tensors)]
                           for k, v in obj.items()]}
    raise CheckpointError(f"optimizer state at {path!r} has unsupported type {type(obj).__name__}")


def _decode(obj: Any, tensors: dict[str, torch.Tensor]) -> Any:
    if isinstance(obj, list):
        return [_decode(v, tensors) for v in obj]
    if not isinstance(obj, dict):
        return obj
    if _T_TENSOR in obj:
        if obj[_T_TENSOR] not in tensors:
            raise CheckpointError(f"{OPTIM_FILE} lacks tensor {obj[_T_TENSOR]!r} named in {STATE_FILE}")
        return tensors[obj[_T_TENSOR]]
    if _T_TUPLE in obj:
        return tuple(_decode(v, tensors) for v in obj[_T_TUPLE])
    if _T_ITEMS in obj:
        return {k: _decode(v, tensors) for k, v in obj[_T_ITEMS]}
    return {k: _decode(v, tensors) for k, v in obj.items()}


def _rng_to_json(rng: RngState) -> dict:
    version, internal, gauss = rng.python
    name, keys, pos, has_gauss, cached = rng.numpy
    return {"python": [version, list(internal), gauss],
            "numpy": [name, np.asarray(keys).tolist(), int(pos), int(has_gauss), float(cached)]}


def _rng_from_json(data: dict, tensors: dict[str, torch.Tensor]) -> RngState:
    version, internal, gauss = data["python"]
    name, keys, pos, has_gauss, cached = data["numpy"]
    n_cuda = sum(k.startswith("torch_cuda.") for k in tensors)
    cuda = tuple(tensors[f"torch_cuda.{i}"] for i in range(n_cuda))
    return RngState(torch_cpu=tensors["torch_cpu"], python=(version, tuple(internal), gauss),
                    numpy=(name, np.asarray(keys, dtype=np.uint32), pos, has_gauss, cached),
                    torch_cuda=cuda)


def _fsync_file(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _write_json(path: Path, data: Any) -> None:
    with open(path, "w", encoding="utf-8") as f:
        json.dump(data, f, indent=1, sort_keys=True)
        f.flush()
        os.fsync(f.fileno())


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(1 << 20):
            h.update(chunk)
    return h.hexdigest()


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
        _write_payload(tmp, state)
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


def _write_payload(tmp: Path, state: CheckpointState) -> None:
    tmp.mkdir()
    save_file(_for_save(state.model_state), str(tmp / MODEL_FILE))
    doc: dict[str, Any] = {"format_version": FORMAT_VERSION, "step": state.step,
                           "policy_version": int(state.policy_version), "saved_at": time.time(),
                           "extra": state.extra, "optimizer": None, "rng": None}
    if state.optimizer_state is not None:
        tensors: dict[str, torch.Tensor] = {}
        doc["optimizer"] = _encode(state.optimizer_state, "", tensors)
        save_file(_for_save(tensors), str(tmp / OPTIM_FILE))
    if state.rng is not None:
        doc["rng"] = _rng_to_json(state.rng)
        rng_tensors = {"torch_cpu": state.rng.torch_cpu}
        rng_tensors.update({f"torch_cuda.{i}": t for i, t in enumerate(state.rng.torch_cuda)})
        save_file(_for_save(rng_tensors), str(tmp / RNG_FILE))
    (tmp / STATE_FILE).write_text(json.dumps(doc, indent=1, sort_keys=True), encoding="utf-8")
    files = {}
    for p in sorted(tmp.iterdir()):
        _fsync_file(p)
        files[p.name] = {"sha256": _sha256(p), "size": p.stat().st_size}
    _write_json(tmp / MANIFEST_FILE, {"format_version": FORMAT_VERSION, "step": state.step,
                                      "files": files})
    _fsync_file(tmp)  # on a directory: makes the entries inside it durable


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
    _fsync_file(final.parent)  # the rename itself must survive a power loss
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
            _verify_cached(p)
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
        _verified.pop(str(p), None)
        logger.debug("pruned checkpoint %s", p.name)


# Checkpoints this process has verified, by path -> (name, mtime_ns, size) of each file: pruning
# checks every kept checkpoint at each save, and rehashing gigabytes each time would be wasteful;
# any change to a file (a rewrite, a truncation) changes its stamp and forces a new check.
_verified: dict[str, tuple] = {}


def _stamp(path: Path) -> tuple | None:
    try:
        return tuple(sorted((f.name, f.stat().st_mtime_ns, f.stat().st_size) for f in path.iterdir()))
    except OSError:
        return None


def _verify_cached(path: Path) -> None:
    stamp = _stamp(path)
    if stamp is not None and _verified.get(str(path)) == stamp:
        return
    _verify(path)
    if stamp is not None:
        _verified[str(path)] = stamp


def list_checkpoints(ckpt_root: Path) -> list[Path]:
    """Complete (MANIFEST present, not verified) checkpoint dirs, ascending by step."""
    return [p for _, p in _step_dirs(Path(ckpt_root)) if (p / MANIFEST_FILE).is_file()]


def newest_valid(ckpt_root: Path) -> Path | None:
    """The checkpoint a resume would load: the newest whose files verify against its manifest
    (hashes checked, tensors not loaded), or None. Corrupt ones are skipped, as ``load_latest``
    skips them."""
    for _, path in reversed(_step_dirs(Path(ckpt_root))):
        try:
            _verify_cached(path)
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


def _read_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise CheckpointError(f"{path}: unparseable json ({e})") from e


def _verify(path: Path) -> dict:
    """Check MANIFEST against the files on disk; return the manifest's file table."""
    if not path.is_dir():
        raise CheckpointError(f"{path}: checkpoint directory not found")
    if not (path / MANIFEST_FILE).is_file():
        raise CheckpointError(f"{path}: {MANIFEST_FILE} missing, checkpoint incomplete "
                              "(interrupted write?)")
    manifest = _read_json(path / MANIFEST_FILE)
    files = manifest.get("files") if isinstance(manifest, dict) else None
    if not isinstance(files, dict):
        raise CheckpointError(f"{path / MANIFEST_FILE}: malformed")
    if manifest.get("format_version") != FORMAT_VERSION:
        raise CheckpointFormatError(f"{path / MANIFEST_FILE}: unsupported format version "
                                    f"{manifest.get('format_version')!r} (this version reads {FORMAT_VERSION})")
    for required in (MODEL_FILE, STATE_FILE):
        if required not in files:
            raise CheckpointError(f"{path / MANIFEST_FILE}: does not list {required}")
    for fname, meta in files.items():
        f = path / fname
        if (Path(fname).name != fname or not isinstance(meta, dict)
                or not isinstance(meta.get("size"), int) or not isinstance(meta.get("sha256"), str)):
            raise CheckpointError(f"{path / MANIFEST_FILE}: bad entry {fname!r}")
        if not f.is_file():
            raise CheckpointError(f"{f}: missing (listed in {MANIFEST_FILE})")
        size = f.stat().st_size
        if size != meta["size"]:
            what = "truncated" if size < meta["size"] else "size mismatch"
            raise CheckpointError(f"{f}: {what}: {size} bytes, manifest says {meta['size']}")
        if _sha256(f) != meta["sha256"]:
            raise CheckpointError(f"{f}: sha256 hash mismatch (corrupted)")
    return files


def _load_tensors(f: Path) -> dict[str, torch.Tensor]:
    try:
        return load_file(str(f))
    except (SafetensorError, OSError) as e:
        raise CheckpointError(f"{f}: unreadable safetensors ({e})") from e


def load_checkpoint(path: Path) -> CheckpointState:
    """Verify and load one checkpoint dir; CheckpointError names the file and the problem."""
    path = Path(path)
    files = _verify(path)
    if (stamp := _stamp(path)) is not None:
        _verified[str(path)] = stamp
    doc = _read_json(path / STATE_FILE)
    try:
        if doc["format_version"] != FORMAT_VERSION:
            raise CheckpointError(f"{path / STATE_FILE}: unsupported format_version "
                                  f"{doc['format_version']!r}")
        optimizer = rng = None
        if doc["optimizer"] is not None:
            if OPTIM_FILE not in files:
                raise CheckpointError(f"{path}: {STATE_FILE} has optimizer state but no {OPTIM_FILE}")
            optimizer = _decode(doc["optimizer"], _load_tensors(path / OPTIM_FILE))
        if doc["rng"] is not None:
            if RNG_FILE not in files:
                raise CheckpointError(f"{path}: {STATE_FILE} has RNG state but no {RNG_FILE}")
            rng = _rng_from_json(doc["rng"], _load_tensors(path / RNG_FILE))
        return CheckpointState(step=int(doc["step"]), policy_version=int(doc["policy_version"]),
                               model_state=_load_tensors(path / MODEL_FILE),
                               optimizer_state=optimizer, rng=rng, extra=doc["extra"],
                               saved_at=float(doc["saved_at"]))
    except (KeyError, TypeError, ValueError) as e:
        raise CheckpointError(f"{path / STATE_FILE}: malformed content ({type(e).__name__}: {e})") from e


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
