"""Group advantages: which baseline each completion's reward is compared against.

Completions with the same group id share a baseline. The caller picks the ids: a node groups its
own completions by task id and a peer's by sender, round and task id (node/run/rollouts.py), so a
peer's completions, from another policy, never set this node's baseline. Groups can have unequal
sizes. Three baselines (docs/algorithm.md, "Baselines"):

- ``mean``: GRPO, b = mean of the group's rewards.
- ``median``: MC-GRPO. Sample G+1 completions; b is the group's median reward, and the median
  completion itself (the *pivot*, whose advantage is 0 by construction) is excluded from the loss,
  so G completions still train. Robust to one outlier reward in small groups.
- ``opob`` / ``opob_approx``: VCPO's off-policy optimal baseline b* = Σ W_i R_i / Σ W_i with
  W_i = ‖∇ log π(y_i)‖² · w_i² (exact, needs per-sample gradient norms) or, as a cheaper
  *approximation* that drops the gradient-norm factor, W_i = w_i².

Pure functions; shapes are written as ``# (B,)``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import torch

Baseline = Literal["mean", "median", "opob", "opob_approx"]
ScaleRewards = Literal["group", "batch", "none"]

__all__ = ["Baseline", "ScaleRewards", "Advantages", "group_advantages"]


@dataclass(frozen=True)
class Advantages:
    advantages: torch.Tensor  # (B,) R_i − b_group(i), optionally divided by a std
    baselines: torch.Tensor  # (B,) the baseline each completion was compared against
    loss_mask: torch.Tensor  # (B,) bool, False for MC-GRPO pivots


def _group_baseline(
    r: torch.Tensor,  # (G,) rewards of one group
    baseline: Baseline,
    w: torch.Tensor | None,  # (G,) truncated sequence weights
    g2: torch.Tensor | None,  # (G,) squared per-sample gradient norms
) -> tuple[float, int | None]:
    """Return (b, pivot index or None) for one group."""
    if baseline == "mean":
        return float(r.mean()), None
    if baseline == "median":
        # torch.median returns the lower of the two middle values for an even group, and the
        # index of one element holding it: that element is the pivot.
        b, idx = torch.median(r, dim=0)
        return float(b), int(idx)
    if baseline in ("opob", "opob_approx"):
        if w is None:
            raise ValueError(f"baseline {baseline!r} needs the sequence importance weights")
        W = w.double() ** 2
        if baseline == "opob":
            if g2 is None:
                raise ValueError("baseline 'opob' needs per-sample squared gradient norms; "
                                 "use 'opob_approx' to drop them")
            W = W * g2.double()
        total = float(W.sum())
        if total <= 0.0:  # every weight truncated to 0: no information, fall back to GRPO
            return float(r.mean()), None
        return float((W * r.double()).sum() / total), None
    raise ValueError(f"unknown baseline {baseline!r}; choose mean, median, opob or opob_approx")


def group_advantages(
    rewards: torch.Tensor,  # (B,)
    group_ids: torch.Tensor,  # (B,) int, equal ids = same prompt
    baseline: Baseline = "mean",
    scale_rewards: ScaleRewards = "none",
    seq_weights: torch.Tensor | None = None,  # (B,) truncated importance weights w̄_i
    grad_sq_norms: torch.Tensor | None = None,  # (B,) ‖∇ log π(y_i)‖²
    eps: float = 1e-4,
) -> Advantages:
    """Advantages A_i = (R_i − b_g) / s, with s the group or batch std (plus eps) or 1."""
    if rewards.dim() != 1 or group_ids.shape != rewards.shape:
        raise ValueError(f"rewards and group_ids must be equal-length 1-D tensors, got "
                         f"{tuple(rewards.shape)} and {tuple(group_ids.shape)}")
    if scale_rewards not in ("group", "batch", "none"):
        raise ValueError(f"unknown scale_rewards {scale_rewards!r}; choose group, batch or none")
    r = rewards.double()
    B = r.numel()
    base = torch.zeros(B, dtype=torch.float64, device=r.device)
    scale = torch.ones(B, dtype=torch.float64, device=r.device)
    loss_mask = torch.ones(B, dtype=torch.bool, device=r.device)
    for gid in torch.unique(group_ids):
        idx = (group_ids == gid).nonzero(as_tuple=True)[0]
        rg = r[idx]
        b, pivot = _group_baseline(
            rg,
            baseline,
            None if seq_weights is None else seq_weights[idx],
            None if grad_sq_norms is None else grad_sq_norms[idx],
        )
        base[idx] = b
        if pivot is not None:
            loss_mask[idx[pivot]] = False
        if scale_rewards == "group":
            scale[idx] = (float(rg.std(unbiased=True)) if idx.numel() > 1 else 0.0) + eps
    if scale_rewards == "batch":
        scale[:] = (r.std(unbiased=True) if B > 1 else 0.0) + eps
    adv = (r - base) / scale
    return Advantages(advantages=adv.to(rewards.dtype if rewards.is_floating_point() else torch.float32),
                      baselines=base.to(torch.float32), loss_mask=loss_mask)
