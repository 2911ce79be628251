"""The files of one checkpoint directory: what each holds, how a node's state is encoded into
them, and writing them, verifying them against their manifest and reading them back.

Layout of ``step_000123/`` (tensors in safetensors, structure in JSON)::

    model.safetensors      trainable model state (tied/shared tensors saved as separate copies)
    optimizer.safetensors  every tensor of optimizer.state_dict(), keyed "state.<idx>.<name>"
    rng.safetensors        torch CPU (and CUDA, when present) generator states
    state.json             step, policy_version, saved_at, extra, optimizer structure, py/np RNG
    MANIFEST.json          written last: sha256 + size of every other file, format version

Every file is fsynced before the manifest is written, so a directory with a manifest that
verifies is complete. Where such directories live, and how one is published atomically, is
node/checkpoint/checkpoint.py's job.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import random
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
from safetensors import SafetensorError
from safetensors.torch import load_file, save_file

from swarm_node.node.errors import CheckpointError, CheckpointFormatError
from swarm_node.node.checkpoint.file_mode import give_plain_mode
from swarm_node.policies.weight_state import tensors_for_save as _for_save  # one rule for tied weights

__all__ = [
    "FORMAT_VERSION", "MANIFEST_FILE", "CheckpointState", "RngState", "capture_rng", "restore_rng",
    "write_files", "fsync_path", "verify_cached", "forget_verified", "load_checkpoint",
]

logger = logging.getLogger("swarm_node.node.run.checkpoint")  # the checkpoint log name, as before the splits

FORMAT_VERSION = 1
MODEL_FILE, OPTIM_FILE, RNG_FILE = "model.safetensors", "optimizer.safetensors", "rng.safetensors"
STATE_FILE, MANIFEST_FILE = "state.json", "MANIFEST.json"
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


def fsync_path(path: Path) -> None:
    """Make ``path`` durable (a file's bytes; on a directory, the entries inside it)."""
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


def write_files(tmp: Path, state: CheckpointState) -> None:
    """Write ``state`` into the new, empty-to-be directory ``tmp``: every file fsynced, the
    manifest last, then the directory itself."""
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
    give_plain_mode(tmp)  # safetensors writes 0600 (node/checkpoint/file_mode.py)
    files = {}
    for p in sorted(tmp.iterdir()):
        fsync_path(p)
        files[p.name] = {"sha256": _sha256(p), "size": p.stat().st_size}
    _write_json(tmp / MANIFEST_FILE, {"format_version": FORMAT_VERSION, "step": state.step,
                                      "files": files})
    fsync_path(tmp)  # on a directory: makes the entries inside it durable


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


# Checkpoints this process has verified, by path -> (name, mtime_ns, size) of each file: pruning
# checks every kept checkpoint at each save, and rehashing gigabytes each time would be wasteful;
# any change to a file (a rewrite, a truncation) changes its stamp and forces a new check.
_verified: dict[str, tuple] = {}


def _stamp(path: Path) -> tuple | None:
    try:
        return tuple(sorted((f.name, f.stat().st_mtime_ns, f.stat().st_size) for f in path.iterdir()))
    except OSError:
        return None


def verify_cached(path: Path) -> None:
    """``_verify``, skipped when this process verified ``path`` and no file in it changed since."""
    stamp = _stamp(path)
    if stamp is not None and _verified.get(str(path)) == stamp:
        return
    _verify(path)
    if stamp is not None:
        _verified[str(path)] = stamp


def forget_verified(path: Path) -> None:
    """Drop ``path`` from the verified cache (it is being deleted)."""
    _verified.pop(str(path), None)
