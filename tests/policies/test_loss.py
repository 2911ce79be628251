"""Hand-checked numbers for policies/loss.py (the corrected GRPO policy loss)."""

from __future__ import annotations

import math

import pytest
import torch

from swarm_node.policies.loss import LossConfig, LossInputs, policy_loss, sequence_weights


def _inputs(logp, beh, mask, adv, *, sample_mask=None, seq_level=None, w=None, beh_seq=None):
    """LossInputs with a leaf ``logp`` (requires_grad) so gradients can be read back."""
    logp = torch.tensor(logp, dtype=torch.float32, requires_grad=True)
    beh = torch.tensor(beh, dtype=torch.float32)
    mask = torch.tensor(mask, dtype=torch.float32)
    B = logp.shape[0]
    return LossInputs(
        logp=logp,
        behaviour_logp=beh,
        behaviour_seq_logp=torch.zeros(B) if beh_seq is None else torch.tensor(beh_seq),
        mask=mask,
        advantages=torch.tensor(adv, dtype=torch.float32),
        sample_mask=torch.ones(B, dtype=torch.bool) if sample_mask is None
        else torch.tensor(sample_mask, dtype=torch.bool),
        sequence_level=torch.zeros(B, dtype=torch.bool) if seq_level is None
        else torch.tensor(seq_level, dtype=torch.bool),
        seq_weights=torch.ones(B) if w is None else torch.tensor(w, dtype=torch.float32),
    )


L = math.log


def test_on_policy_dapo_is_minus_mean_advantage():
    lp = [[-1.0, -2.0, -0.5], [-0.3, -7.0, -7.0]]
    x = _inputs(lp, lp, [[1, 1, 1], [1, 0, 0]], [2.0, -1.0])
    out = policy_loss(x, LossConfig())
    # ratio 1 everywhere; 4 real tokens: -(2 + 2 + 2 + (-1))/4 = -5/4
    assert out.loss.item() == pytest.approx(-1.25)
    assert out.metrics["clip_frac"] == 0.0
    assert out.metrics["ratio_mean"] == pytest.approx(1.0)
    out.loss.backward()
    # d/dlogp of -(r·A)/N with r = 1: -A/N → row 0: -2/4 = -0.5, row 1: +1/4 = 0.25, padding 0
    assert torch.allclose(x.logp.grad, torch.tensor([[-0.5, -0.5, -0.5], [0.25, 0.0, 0.0]]))


def test_ppo_asymmetric_clipping():
    # row 0 (A = +2): ratios 1.5, 0.5, 1; row 1 (A = -1): ratios 0.5, 1.5, 1
    beh = [[0.0, 0.0, 0.0], [0.0, 0.0, 0.0]]
    lp = [[L(1.5), L(0.5), 0.0], [L(0.5), L(1.5), 0.0]]
    x = _inputs(lp, beh, [[1, 1, 1], [1, 1, 1]], [2.0, -1.0])
    out = policy_loss(x, LossConfig(epsilon=0.2, epsilon_high=0.28))
    # row 0: min(1.5·2, 1.28·2) = 2.56 (clipped); min(0.5·2, 0.8·2) = 1.0 (not clipped); 2.0
    # row 1: min(0.5·-1, 0.8·-1) = -0.8 (clipped); min(1.5·-1, 1.28·-1) = -1.5 (not); -1.0
    # sum = 5.56 - 3.3 = 2.26 → loss = -2.26/6 = -0.376667
    assert out.loss.item() == pytest.approx(-2.26 / 6, abs=1e-6)
    # 2 of 6 tokens clipped
    assert out.metrics["clip_frac"] == pytest.approx(1 / 3)
    # ratio_mean = (1.5+0.5+1+0.5+1.5+1)/6 = 1
    assert out.metrics["ratio_mean"] == pytest.approx(1.0)
    out.loss.backward()
    # clipped tokens carry no gradient; others: d(-r·A/6)/dlogp = -r·A/6
    # row 0: 0, -0.5·2/6 = -1/6, -1·2/6 = -1/3; row 1: 0, -1.5·-1/6 = 0.25, 1/6
    expected = torch.tensor([[0.0, -1 / 6, -1 / 3], [0.0, 0.25, 1 / 6]])
    assert torch.allclose(x.logp.grad, expected, atol=1e-6)


def test_ppo_symmetric_clipping_when_epsilon_high_none():
    x = _inputs([[L(1.5)]], [[0.0]], [[1]], [1.0])
    out = policy_loss(x, LossConfig(epsilon=0.2, epsilon_high=None))
    # min(1.5, 1.2) = 1.2 → loss -1.2
    assert out.loss.item() == pytest.approx(-1.2, abs=1e-6)
    assert out.metrics["clip_frac"] == 1.0


def test_delta_clamp():
    cfg = LossConfig(delta=4.0)
    # ratio 10, A = -1: unclipped clamped to 4 → min(-4, -1.28) = -4 → loss +4 (not +10)
    out = policy_loss(_inputs([[L(10.0)]], [[0.0]], [[1]], [-1.0]), cfg)
    assert out.loss.item() == pytest.approx(4.0, abs=1e-5)
    # without δ: min(-10, -1.28) = -10 → loss +10
    out = policy_loss(_inputs([[L(10.0)]], [[0.0]], [[1]], [-1.0]), LossConfig(delta=None))
    assert out.loss.item() == pytest.approx(10.0, abs=1e-4)
    # ratio 10, A = +1: min(4, 1.28) = 1.28 → loss -1.28
    out = policy_loss(_inputs([[L(10.0)]], [[0.0]], [[1]], [1.0]), cfg)
    assert out.loss.item() == pytest.approx(-1.28, abs=1e-6)


def test_m2po_drops_outlier_and_does_not_clip():
    x = _inputs([[0.1, 0.4, 3.0]], [[0.0, 0.0, 0.0]], [[1, 1, 1]], [1.0])
    out = policy_loss(x, LossConfig(m2po_tau=0.1))
    # (log r)² = 0.01, 0.16, 9; prefix means 0.01, 0.085, 3.06 → keep the first two (τ = 0.1)
    # no clipping: e^0.1 + e^0.4 = 1.105171 + 1.491825 = 2.596996 (1.4918 > 1.28 stays unclipped)
    # loss = -2.596996/2 = -1.298498
    assert out.loss.item() == pytest.approx(-1.298498, abs=1e-5)
    assert out.metrics["m2po_masked_frac"] == pytest.approx(1 / 3)
    assert out.metrics["clip_frac"] == 0.0
    out.loss.backward()
    # gradient -r·A/N on kept tokens: -1.105171/2, -1.491825/2; the dropped token gets 0
    assert torch.allclose(x.logp.grad, torch.tensor([[-0.552585, -0.745912, 0.0]]), atol=1e-5)


def test_m2po_extreme_outlier_stays_finite():
    # a peer claiming log μ = -1000 for a token: ratio e^1000 = inf in float32; M2PO drops the
    # token, and a dropped token must contribute exactly 0 (not inf·0 = nan) to loss and gradient
    x = _inputs([[-0.5, -0.5, -1.0]], [[-0.5, -0.5, -1000.0]], [[1, 1, 1]], [1.0])
    out = policy_loss(x, LossConfig(m2po_tau=0.1))
    # kept: two tokens with ratio 1 → loss -(1 + 1)/2 = -1
    assert out.loss.item() == pytest.approx(-1.0)
    out.loss.backward()
    assert torch.isfinite(x.logp.grad).all()
    # -r·A/N = -1/2 on the kept tokens, 0 on the dropped one
    assert torch.allclose(x.logp.grad, torch.tensor([[-0.5, -0.5, 0.0]]))


@pytest.mark.parametrize("cfg,adv,expected_loss,expected_grad", [
    # PPO, A = +1: outlier clipped to 1.28 → loss -(1 + 1 + 1.28)/3 = -1.093333; no grad through it
    (LossConfig(delta=None), 1.0, -3.28 / 3, [-1 / 3, -1 / 3, 0.0]),
    # δ = 4, A = -1: outlier ratio clamped to 4 → min(-4, -1.28) = -4 → loss (1 + 1 + 4)/3 = 2;
    # the clamp is saturated so the outlier gets 0 gradient (not 0·inf = nan)
    (LossConfig(delta=4.0), -1.0, 2.0, [1 / 3, 1 / 3, 0.0]),
])
def test_extreme_outlier_token_level_finite(cfg, adv, expected_loss, expected_grad):
    x = _inputs([[-0.5, -0.5, -1.0]], [[-0.5, -0.5, -1000.0]], [[1, 1, 1]], [adv])
    out = policy_loss(x, cfg)
    assert out.loss.item() == pytest.approx(expected_loss, abs=1e-6)
    out.loss.backward()
    assert torch.allclose(x.logp.grad, torch.tensor([expected_grad]), atol=1e-6)


def test_sequence_level_rows_value_and_gradient():
    # row 0: same tokenizer, on-policy (ratio 1), A = 1, 2 tokens
    # row 1: foreign tokenizer, w̄ = 3, A = 0.5, 3 tokens; its per-token behaviour values are
    #        garbage (100) and must be ignored
    x = _inputs([[-1.0, -2.0, 0.0], [-0.5, -0.25, -1.5]],
                [[-1.0, -2.0, 0.0], [100.0, 100.0, 100.0]],
                [[1, 1, 0], [1, 1, 1]], [1.0, 0.5], seq_level=[False, True], w=[1.0, 3.0])
    out = policy_loss(x, LossConfig())
    # per token: row 0 → -1·1 twice; row 1 → -3·0.5 = -1.5 three times; N = 5
    # loss = -(2 + 4.5)/5 = -1.3
    assert out.loss.item() == pytest.approx(-1.3, abs=1e-6)
    assert out.metrics["seq_level_frac"] == 0.5
    assert out.metrics["weight_mean"] == pytest.approx(2.0)  # (1 + 3)/2
    assert out.metrics["clip_frac"] == 0.0
    out.loss.backward()
    # gradient: row 0 -A/N = -0.2; row 1 -w̄·A/N = -1.5/5 = -0.3 on every token
    assert torch.allclose(x.logp.grad, torch.tensor([[-0.2, -0.2, 0.0], [-0.3, -0.3, -0.3]]))


def test_sequence_level_config_applies_to_all_rows():
    # token ratio 1.5 would be clipped at the token level; at the sequence level w̄ is given
    x = _inputs([[L(1.5), 0.0]], [[0.0, 0.0]], [[1, 1]], [2.0], w=[8.0])
    out = policy_loss(x, LossConfig(importance_sampling_level="sequence"))
    # value -w̄·A per token = -16, mean over 2 tokens = -16
    assert out.loss.item() == pytest.approx(-16.0)
    assert out.metrics["seq_level_frac"] == 1.0
    out.loss.backward()
    # gradient -w̄·A/N = -16/2 = -8 per token (no clipping at the sequence level)
    assert torch.allclose(x.logp.grad, torch.tensor([[-8.0, -8.0]]))


def test_sequence_weights_truncated_and_detached():
    logp = torch.tensor([[-1.0, -1.0], [-0.5, -9.0]], requires_grad=True)
    mask = torch.tensor([[1.0, 1.0], [1.0, 0.0]])
    beh_seq = torch.tensor([-2.0 - math.log(20.0), -0.5 + math.log(4.0)])
    w = sequence_weights(logp, mask, beh_seq, 8.0)
    # row 0: -2 - (-2 - log 20) = log 20 → 20 → capped at 8
    # row 1: -0.5 - (-0.5 + log 4) = -log 4 → 0.25
    assert torch.allclose(w, torch.tensor([8.0, 0.25]), atol=1e-6)
    assert not w.requires_grad


@pytest.mark.parametrize("loss_type,expected", [
    # row 0: A = 2, 1 token; row 1: A = 1, 3 tokens; ratio 1
    ("dapo", -1.25),      # -(2 + 3)/4 tokens
    ("grpo", -1.5),       # per-seq means -2/1 = -2 and -3/3 = -1 → mean -1.5
    ("dr_grpo", -0.625),  # -(2 + 3)/(B·L) = -5/(2·4)
])
def test_normalisation_unequal_lengths(loss_type, expected):
    lp = [[-1.0, 0.0, 0.0], [-1.0, -1.0, -1.0]]
    x = _inputs(lp, lp, [[1, 0, 0], [1, 1, 1]], [2.0, 1.0])
    out = policy_loss(x, LossConfig(loss_type=loss_type, max_completion_length=4))
    assert out.loss.item() == pytest.approx(expected)


@pytest.mark.parametrize("loss_type,expected", [
    # row 0 excluded (an MC-GRPO pivot): only row 1's 3 tokens with A = 1 remain
    ("dapo", -1.0),       # -3/3
    ("grpo", -1.0),       # one live sequence with mean -1
    ("dr_grpo", -0.375),  # -3/(2·4): B still counts the excluded row, as in TRL
])
def test_sample_mask_excludes_row(loss_type, expected):
    lp = [[-1.0, 0.0, 0.0], [-1.0, -1.0, -1.0]]
    x = _inputs(lp, lp, [[1, 0, 0], [1, 1, 1]], [2.0, 1.0], sample_mask=[False, True])
    out = policy_loss(x, LossConfig(loss_type=loss_type, max_completion_length=4))
    assert out.loss.item() == pytest.approx(expected)
    out.loss.backward()
    assert x.logp.grad[0].abs().sum().item() == 0.0


def test_sample_mask_excludes_from_clip_frac():
    # row 0 (excluded) would be clipped; row 1 has ratio 1
    x = _inputs([[L(1.5)], [0.0]], [[0.0], [0.0]], [[1], [1]], [1.0, 1.0], sample_mask=[False, True])
    out = policy_loss(x, LossConfig())
    assert out.metrics["clip_frac"] == 0.0
    assert out.loss.item() == pytest.approx(-1.0)


def test_unknown_loss_type():
    lp = [[-1.0]]
    with pytest.raises(ValueError):
        policy_loss(_inputs(lp, lp, [[1]], [1.0]), LossConfig(loss_type="sum"))
