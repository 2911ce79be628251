"""Rows that carry no gradient, known from the rewards before any forward pass.

A group whose rewards are all equal has advantage exactly 0 on every row under every baseline
this learner has (its mean, its median and any weighted mean of equal values are that value),
so its rows add exactly 0 to the loss's gradient: they count only in the loss's denominator
(dapo divides by every used token of the batch). On a real model most of a step's groups are
often such (SmolLM2-135M-Instruct: 75% of rows in the first steps), and a forward and backward
pass over them is most of the learner's time for nothing. The learner leaves them out of its
passes and divides by the whole batch's denominator, so the update is the one it would make with
them (tests/policies/test_inert_rows.py checks it equal).

Exact only where nothing else of the batch reaches a live row's loss: not with ``scale_rewards
batch`` (the batch's reward std), M2PO (a second moment over every token) or exact OPOB
(per-row gradient norms); ``skippable`` says so, and those configurations learn on every row.
"""

from __future__ import annotations

import torch

from swarm_node.policies.advantages import group_advantages
from swarm_node.policies.loss import LossConfig, loss_denominator

__all__ = ["inert_loss_metrics", "live_rows", "rewards_only_advantages", "skippable", "whole_batch_denominator"]


def skippable(baseline: str, scale_rewards: str, cfg: LossConfig) -> bool:
    """Whether leaving inert rows out leaves the update unchanged under these settings."""
    return scale_rewards != "batch" and cfg.m2po_tau is None and baseline != "opob"


def live_rows(rewards: torch.Tensor, group_ids: torch.Tensor) -> torch.Tensor:
    """(B,) bool: the rows of groups whose rewards are not all exactly equal."""
    live = torch.zeros_like(rewards, dtype=torch.bool)
    for gid in torch.unique(group_ids):
        idx = (group_ids == gid).nonzero(as_tuple=True)[0]
        r = rewards[idx]
        if bool((r != r[0]).any()):
            live[idx] = True
    return live


def rewards_only_advantages(rewards: torch.Tensor, group_ids: torch.Tensor, baseline: str, scale_rewards: str):
    """The advantages as far as the rewards decide them, with no forward pass: exact for the rows
    of inert groups (0 under every baseline) and for which rows the loss leaves out (MC-GRPO's
    pivots depend on the rewards alone; opob_approx's weights move its baseline, never a row's
    place in the loss)."""
    return group_advantages(rewards, group_ids, baseline if baseline in ("mean", "median") else "mean", scale_rewards)


def whole_batch_denominator(completion_mask: torch.Tensor, rewards: torch.Tensor, group_ids: torch.Tensor,
                            baseline: str, scale_rewards: str, cfg: LossConfig) -> tuple[torch.Tensor, torch.Tensor]:
    """The loss's denominator over the whole batch, inert rows included, without a forward pass:
    the tokens the loss uses are every completion token of every row it does not leave out (an
    MC-GRPO pivot), on either path. Only M2PO's mask would need log-probs (not ``skippable``).
    Returns it and the (B,) rows the loss keeps."""
    keep = rewards_only_advantages(rewards, group_ids, baseline, scale_rewards).loss_mask
    used = completion_mask * keep.to(completion_mask.dtype).unsqueeze(-1)
    return loss_denominator(used, cfg), keep


def inert_loss_metrics(foreign: torch.Tensor, cfg: LossConfig) -> dict:
    """The loss's GRPO diagnostics for a batch none of whose rows carries GRPO gradient (``foreign``:
    (B,) bool, its rows of another tokenizer): nothing clipped, no ratio or weight to report."""
    seq = 1.0 if cfg.importance_sampling_level == "sequence" else float(foreign.float().mean())
    return dict(clip_frac=0.0, m2po_masked_frac=0.0, ratio_mean=None, weight_mean=None, seq_level_frac=seq,
                ext_pos_rows=0.0, ext_pos_frac=0.0, ext_pos_weight_mean=None, ext_pos_low_frac=None,
                ext_pos_floored_frac=None, ext_pos_ess=None)
