"""Hand-checked numbers for policies/advantages.py (group baselines: mean, median, OPOB)."""

from __future__ import annotations

import math

import pytest
import torch

from swarm_node.policies.advantages import group_advantages


def _close(t: torch.Tensor, expected: list[float], tol: float = 1e-6) -> bool:
    return torch.allclose(t.double(), torch.tensor(expected, dtype=torch.float64), atol=tol)


def test_mean_baseline_unequal_groups():
    rewards = torch.tensor([1.0, 0.0, 0.0, 0.5, 1.0])
    gids = torch.tensor([0, 0, 0, 1, 1])
    out = group_advantages(rewards, gids, "mean")
    # group 0: mean(1, 0, 0) = 1/3 → A = 2/3, -1/3, -1/3
    # group 1: mean(0.5, 1) = 0.75 → A = -0.25, 0.25
    assert _close(out.advantages, [2 / 3, -1 / 3, -1 / 3, -0.25, 0.25])
    assert _close(out.baselines, [1 / 3, 1 / 3, 1 / 3, 0.75, 0.75])
    assert out.loss_mask.tolist() == [True] * 5


def test_group_ids_need_not_be_contiguous():
    rewards = torch.tensor([1.0, 3.0, 0.0, 5.0])
    gids = torch.tensor([7, 2, 7, 2])
    out = group_advantages(rewards, gids, "mean")
    # group 7: rows 0, 2 → mean 0.5 → 0.5, -0.5; group 2: rows 1, 3 → mean 4 → -1, 1
    assert _close(out.advantages, [0.5, -1.0, -0.5, 1.0])


def test_group_std_scaling_unbiased():
    rewards = torch.tensor([1.0, 0.0, 0.0, 2.0, 4.0])
    gids = torch.tensor([0, 0, 0, 1, 1])
    eps = 1e-4
    out = group_advantages(rewards, gids, "mean", scale_rewards="group", eps=eps)
    # group 0: mean 1/3, deviations 2/3, -1/3, -1/3; Σd² = 4/9+1/9+1/9 = 6/9 = 2/3;
    #   unbiased var = (2/3)/2 = 1/3 → std = sqrt(1/3) = 0.57735
    s0 = math.sqrt(1 / 3) + eps
    # group 1: mean 3, deviations -1, 1; var = 2/1 = 2 → std = sqrt 2 = 1.41421
    s1 = math.sqrt(2) + eps
    assert _close(out.advantages, [(2 / 3) / s0, (-1 / 3) / s0, (-1 / 3) / s0, -1 / s1, 1 / s1])


def test_batch_std_scaling():
    rewards = torch.tensor([1.0, 0.0, 0.0, 2.0, 4.0])
    gids = torch.tensor([0, 0, 0, 1, 1])
    eps = 1e-4
    out = group_advantages(rewards, gids, "mean", scale_rewards="batch", eps=eps)
    # batch mean = 7/5 = 1.4; deviations -0.4, -1.4, -1.4, 0.6, 2.6;
    # Σd² = 0.16 + 1.96 + 1.96 + 0.36 + 6.76 = 11.2; unbiased var = 11.2/4 = 2.8; std = 1.673320
    s = math.sqrt(2.8) + eps
    # numerators are the group-mean advantages: 2/3, -1/3, -1/3, -1, 1
    assert _close(out.advantages, [(2 / 3) / s, (-1 / 3) / s, (-1 / 3) / s, -1 / s, 1 / s])


def test_median_mc_grpo_odd_group():
    rewards = torch.tensor([0.0, 1.0, 1.0, 0.0, 1.0])  # G + 1 = 5
    gids = torch.zeros(5, dtype=torch.long)
    out = group_advantages(rewards, gids, "median")
    # sorted 0, 0, 1, 1, 1 → median 1; A = R - 1 = [-1, 0, 0, -1, 0]
    assert _close(out.advantages, [-1.0, 0.0, 0.0, -1.0, 0.0])
    assert _close(out.baselines, [1.0] * 5)
    # exactly one pivot excluded, and it holds the median reward
    assert int((~out.loss_mask).sum()) == 1
    pivot = int((~out.loss_mask).nonzero()[0])
    assert rewards[pivot].item() == 1.0


def test_median_even_group_uses_lower_median():
    rewards = torch.tensor([3.0, 0.0, 2.0, 1.0])
    gids = torch.zeros(4, dtype=torch.long)
    out = group_advantages(rewards, gids, "median")
    # sorted 0, 1, 2, 3 → lower median 1 (not 1.5); A = [2, -1, 1, 0]; pivot is row 3 (reward 1)
    assert _close(out.advantages, [2.0, -1.0, 1.0, 0.0])
    assert out.loss_mask.tolist() == [True, True, True, False]


def test_median_one_pivot_per_group():
    rewards = torch.tensor([0.0, 5.0, 1.0, 2.0, 2.0, 9.0])
    gids = torch.tensor([0, 0, 0, 1, 1, 1])
    out = group_advantages(rewards, gids, "median")
    # group 0: sorted 0, 1, 5 → median 1 → A = -1, 4, 0; pivot row 2
    # group 1: sorted 2, 2, 9 → median 2 → A = 0, 0, 7; pivot one of rows 3, 4
    assert _close(out.advantages, [-1.0, 4.0, 0.0, 0.0, 0.0, 7.0])
    assert out.loss_mask[:3].tolist() == [True, True, False]
    assert int((~out.loss_mask[3:]).sum()) == 1 and bool(out.loss_mask[5])


def test_opob_approx_hand_example():
    rewards = torch.tensor([1.0, 0.0])
    gids = torch.zeros(2, dtype=torch.long)
    w = torch.tensor([1.0, 2.0])
    out = group_advantages(rewards, gids, "opob_approx", seq_weights=w)
    # W = w² = [1, 4]; b = (1·1 + 4·0)/(1 + 4) = 1/5 → A = [0.8, -0.2]
    assert _close(out.baselines, [0.2, 0.2])
    assert _close(out.advantages, [0.8, -0.2])


def test_opob_exact_uses_grad_norms():
    rewards = torch.tensor([1.0, 0.0, 0.5])
    gids = torch.zeros(3, dtype=torch.long)
    w = torch.tensor([1.0, 2.0, 1.0])
    g2 = torch.tensor([4.0, 1.0, 2.0])
    out = group_advantages(rewards, gids, "opob", seq_weights=w, grad_sq_norms=g2)
    # W = g²·w² = [4·1, 1·4, 2·1] = [4, 4, 2]; Σ W = 10
    # b = (4·1 + 4·0 + 2·0.5)/10 = 5/10 = 0.5 → A = [0.5, -0.5, 0]
    assert _close(out.baselines, [0.5, 0.5, 0.5])
    assert _close(out.advantages, [0.5, -0.5, 0.0])
    # approx drops g²: W = [1, 4, 1], b = (1 + 0 + 0.5)/6 = 0.25 → differs from exact
    approx = group_advantages(rewards, gids, "opob_approx", seq_weights=w)
    assert _close(approx.baselines, [0.25, 0.25, 0.25])


def test_opob_per_group():
    rewards = torch.tensor([1.0, 0.0, 3.0, 1.0])
    gids = torch.tensor([0, 0, 1, 1])
    w = torch.tensor([1.0, 2.0, 3.0, 1.0])
    out = group_advantages(rewards, gids, "opob_approx", seq_weights=w)
    # group 0: W = [1, 4] → b = 1/5 = 0.2; group 1: W = [9, 1] → b = (27 + 1)/10 = 2.8
    assert _close(out.baselines, [0.2, 0.2, 2.8, 2.8])
    assert _close(out.advantages, [0.8, -0.2, 0.2, -1.8])


def test_opob_without_weights_raises():
    rewards = torch.tensor([1.0, 0.0])
    gids = torch.zeros(2, dtype=torch.long)
    with pytest.raises(ValueError):
        group_advantages(rewards, gids, "opob_approx")
    with pytest.raises(ValueError):
        group_advantages(rewards, gids, "opob", seq_weights=torch.ones(2))  # no grad norms


def test_opob_all_zero_weights_falls_back_to_mean():
    rewards = torch.tensor([1.0, 0.0, 0.0, 0.0])
    gids = torch.zeros(4, dtype=torch.long)
    out = group_advantages(rewards, gids, "opob_approx", seq_weights=torch.zeros(4))
    # Σ W = 0 → mean baseline 0.25 → A = [0.75, -0.25, -0.25, -0.25]
    assert _close(out.advantages, [0.75, -0.25, -0.25, -0.25])


def test_singleton_group_gets_zero_advantage():
    rewards = torch.tensor([0.7, 1.0, 0.0])
    gids = torch.tensor([0, 1, 1])
    for baseline in ("mean", "median"):
        for scale in ("none", "group"):
            out = group_advantages(rewards, gids, baseline, scale_rewards=scale)
            # singleton: b = its own reward → A = 0 (group std 0 + eps does not blow up: 0/eps = 0)
            assert out.advantages[0].item() == 0.0
            assert torch.isfinite(out.advantages).all()
    out = group_advantages(rewards, gids, "opob_approx", seq_weights=torch.tensor([3.0, 1.0, 1.0]))
    assert out.advantages[0].item() == 0.0  # W·R/W = R


def test_invalid_arguments():
    with pytest.raises(ValueError):
        group_advantages(torch.tensor([1.0, 0.0]), torch.tensor([0]), "mean")
    with pytest.raises(ValueError):
        group_advantages(torch.tensor([1.0]), torch.tensor([0]), "mean", scale_rewards="max")
    with pytest.raises(ValueError):
        group_advantages(torch.tensor([1.0]), torch.tensor([0]), "mode")
