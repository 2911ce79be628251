"""Out-of-memory recovery: run a piece of work at a batch size, halving it when the device runs out.

A consumer GPU is shared by generation and training, and what fits depends on how long this
step's completions are: a run that fitted for hours can run out of memory on one long batch.
``fit_by_halving`` retries the work at half the rows each time a CUDA (or any torch) out-of-memory
error is raised, and says so; at one row it gives up with ``OutOfMemory``, a clear error naming
what did not fit. The learner (micro-batch) and generation (rows per ``generate`` call) both use it;
the size it ends at is kept by the caller so later steps do not pay the failed attempt again.
"""

from __future__ import annotations

import gc
import logging
from typing import Callable, TypeVar

import torch

from swarm_node.policies.errors import PolicyError

log = logging.getLogger(__name__)

__all__ = ["OutOfMemory", "is_out_of_memory", "release_memory", "fit_by_halving"]

T = TypeVar("T")


class OutOfMemory(PolicyError):
    """Even one row of the work does not fit in the device's memory."""


def is_out_of_memory(e: BaseException) -> bool:
    """A device allocation failure: torch.OutOfMemoryError (CUDA, and XPU/MPS in recent torch), or
    the plain RuntimeError older backends raise with the same words."""
    if isinstance(e, torch.OutOfMemoryError):
        return True
    return isinstance(e, RuntimeError) and "out of memory" in str(e).lower()


def release_memory(device: torch.device | str | None = None) -> None:
    """Give the failed attempt's cached blocks back before the retry (they would fragment it)."""
    gc.collect()
    dev = torch.device(device) if device is not None else None
    if torch.cuda.is_available() and (dev is None or dev.type == "cuda"):
        torch.cuda.empty_cache()


def fit_by_halving(attempt: Callable[[int], T], size: int, *, what: str, hint: str = "",
                   device: torch.device | str | None = None,
                   on_halve: Callable[[int, int], None] | None = None) -> tuple[T, int]:
    """``attempt(size)``, retried at ``size // 2`` after each out-of-memory error, down to 1.

    Returns ``(result, size it succeeded at)``. ``on_halve(old, new)`` is told of each halving
    (for metrics). ``attempt`` must leave nothing half-applied when it raises: the caller's
    state (gradients, the optimizer) is what it was before the attempt.
    """
    if size < 1:
        raise ValueError(f"size must be >= 1, got {size}")
    while True:
        failed = None
        try:
            return attempt(size), size
        except Exception as e:  # noqa: BLE001 (only out-of-memory is handled; the rest re-raised)
            if not is_out_of_memory(e):
                raise
            failed = f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"
        # Out of the except block: the traceback (and the tensors its frames hold) is gone now.
        release_memory(device)
        if size <= 1:
            raise OutOfMemory(f"{what} does not fit in memory even one row at a time ({failed})"
                              + (f"; {hint}" if hint else ""))
        new = max(1, size // 2)
        log.warning("out of memory in %s at %d rows: retrying at %d (%s)", what, size, new, failed)
        if on_halve is not None:
            on_halve(size, new)
        size = new
