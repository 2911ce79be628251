"""Stopping a generation mid-way when asked: a stopping criterion that ends every row at the next
token once a flag is raised, and the error the sampling call raises then.

A ``model.generate`` call runs in a worker thread and cannot be cancelled from outside; a thread
is not interrupted. What it does check, once per new token, is its stopping criteria (the same
hook ``RowStops`` uses, policies/partial_generation.py). ``Policy.halt``, when set, is read there
through ``HaltWhen``; a call it ended raises ``GenerationStopped`` rather than return rows cut
short, so no rollout of a cut generation is ever scored, labelled or shared. The overlap's stop
(node/run/overlap.py) raises the flag, so a node's exit waits a token, not a generation.
"""

from __future__ import annotations

from typing import Callable

import torch

__all__ = ["GenerationStopped", "HaltWhen"]


class GenerationStopped(Exception):
    """A generation ended by ``Policy.halt``: its rows are dropped, not returned."""


class HaltWhen:
    """A transformers stopping criterion: every row ends once ``flag()`` is true."""

    def __init__(self, flag: Callable[[], bool]):
        self.flag = flag
        self.fired = False

    def __call__(self, input_ids: torch.Tensor, scores=None, **kwargs) -> torch.Tensor:
        self.fired = self.fired or bool(self.flag())
        return torch.full((input_ids.shape[0],), self.fired, dtype=torch.bool, device=input_ids.device)
