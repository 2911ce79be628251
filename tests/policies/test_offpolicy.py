"""Hand-checked numbers for policies/offpolicy.py (design.md section 2).

Every expected value is worked out by hand in the comment beside it; none is computed with the
function under test.
"""

from __future__ import annotations

import math

import pytest
import torch

from swarm_node.policies.offpolicy import (
    effective_sample_size,
    ess_fraction,
    ess_fraction_by_source,
    lr_factor,
    m2po_mask,
    sequence_log_weights,
    token_log_ratios,
    truncated_weights,
)


# --- token_log_ratios ------------------------------------------------------------------------

def test_token_log_ratios_masks_padding():
    logp = torch.tensor([[-1.0, -2.0, -3.0], [-0.5, -0.25, -9.0]])
    beh = torch.tensor([[-1.5, -1.0, -7.0], [-0.5, -1.25, -2.0]])
    mask = torch.tensor([[1.0, 1.0, 0.0], [1.0, 1.0, 0.0]])
    out = token_log_ratios(logp, beh, mask)
    # row 0: -1-(-1.5)=0.5, -2-(-1)=-1, padding → 0 (would be -3+7=4)
    # row 1: -0.5+0.5=0,  -0.25+1.25=1, padding → 0 (would be -9+2=-7)
    expected = torch.tensor([[0.5, -1.0, 0.0], [0.0, 1.0, 0.0]])
    assert torch.allclose(out, expected)
    # exp of a padded entry is exactly ratio 1
    assert torch.exp(out)[0, 2].item() == 1.0


# --- sequence_log_weights ------------------------------------------------------------------------

def test_sequence_log_weights_with_foreign_tokenizer_row():
    logp = torch.tensor([[-1.0, -2.0, -0.5], [-0.25, -0.75, -4.0]])
    mask = torch.tensor([[1.0, 1.0, 1.0], [1.0, 1.0, 0.0]])
    # Row 0: same tokenizer, μ's seq logp = -4.0.
    # Row 1: a peer with another tokenizer reported only Σ log μ = -3.0 for the same string
    # (its token log-probs do not align with ours and are not used).
    beh_seq = torch.tensor([-4.0, -3.0])
    out = sequence_log_weights(logp, mask, beh_seq)
    # row 0: (-1 - 2 - 0.5) - (-4)  = -3.5 + 4 = 0.5
    # row 1: (-0.25 - 0.75) - (-3) = -1 + 3   = 2.0   (the -4.0 on padding is ignored)
    assert torch.allclose(out, torch.tensor([0.5, 2.0]))


# --- truncated_weights ---------------------------------------------------------------------------

def test_truncated_weights_cap_and_overflow():
    log_w = torch.tensor([0.0, math.log(2.0), math.log(20.0), 1000.0, -1000.0])
    w = truncated_weights(log_w, 8.0)
    # exp(0)=1, exp(log 2)=2, exp(log 20)=20 → capped at 8, exp(1000) would be inf → 8,
    # exp(-1000) underflows to 0 (no truncation from below)
    assert torch.allclose(w, torch.tensor([1.0, 2.0, 8.0, 8.0, 0.0]), atol=1e-6)
    assert torch.isfinite(w).all()
    assert not torch.isnan(w).any()


def test_truncated_weights_rejects_nonpositive_cap():
    with pytest.raises(ValueError):
        truncated_weights(torch.tensor([0.0]), 0.0)
    with pytest.raises(ValueError):
        truncated_weights(torch.tensor([0.0]), -1.0)


# --- ESS and ρ -----------------------------------------------------------------------------------

def test_ess_equal_weights():
    w = torch.tensor([1.0, 1.0, 1.0, 1.0])
    # (1+1+1+1)² / (1+1+1+1) = 16/4 = 4; ρ = 4/4 = 1
    assert effective_sample_size(w) == pytest.approx(4.0)
    assert ess_fraction(w) == pytest.approx(1.0)


def test_ess_one_sample_carries_all():
    w = torch.tensor([4.0, 0.0, 0.0, 0.0])
    # (4)² / (16) = 1; ρ = 1/4
    assert effective_sample_size(w) == pytest.approx(1.0)
    rho = ess_fraction(w)
    assert rho == pytest.approx(0.25)
    # sqrt rule: sqrt(min(1, 0.25/1)) = 0.5; linear: 0.25
    assert lr_factor(rho, "sqrt") == pytest.approx(0.5)
    assert lr_factor(rho, "linear") == pytest.approx(0.25)


def test_ess_mixed_weights():
    w = torch.tensor([2.0, 1.0, 1.0, 0.0])
    # Σw = 4, Σw² = 4+1+1+0 = 6 → ESS = 16/6 = 2.666…, ρ = (16/6)/4 = 2/3
    assert effective_sample_size(w) == pytest.approx(16.0 / 6.0)
    assert ess_fraction(w) == pytest.approx(2.0 / 3.0)


def test_ess_scale_invariant_and_degenerate():
    # multiplying all weights by 3: (12)²/(9·6)=144/54=16/6, unchanged
    assert effective_sample_size(torch.tensor([6.0, 3.0, 3.0, 0.0])) == pytest.approx(16.0 / 6.0)
    # all zero → 0 by convention, empty → ρ = 0
    assert effective_sample_size(torch.zeros(3)) == 0.0
    assert ess_fraction(torch.zeros(0)) == 0.0


# --- ESS per behaviour source ------------------------------------------------------------------

LOCAL4_PEER2 = torch.tensor([0, 0, 0, 0, 1, 1])  # four local rows, then one peer's two


def test_per_source_rho_ignores_a_peers_capped_weights():
    w = torch.tensor([1.0, 1.0, 1.0, 1.0, 8.0, 8.0])  # the peer claims log μ = -100/token: w̄ = c
    # Pooled (the old rule): Σw = 20, Σw² = 4 + 128 = 132 → ESS = 400/132 = 3.0303, ρ = 0.50505
    assert ess_fraction(w) == pytest.approx(400 / 132 / 6)
    # Per source: ρ_local = 16/(4·4) = 1, ρ_peer = 16²/(2·128) = 1 → ρ = (4·1 + 2·1)/6 = 1
    assert ess_fraction_by_source(w, LOCAL4_PEER2) == pytest.approx(1.0)


def test_per_source_rho_loses_at_most_the_peers_share():
    w = torch.tensor([1.0, 1.0, 1.0, 1.0, 8.0, 0.0])  # the peer claims -100 on one row, 0 on the other
    # Pooled: Σw = 12, Σw² = 4 + 64 = 68 → ESS = 144/68 = 2.1176, ρ = 0.35294 (LR factor 0.594)
    assert ess_fraction(w) == pytest.approx(144 / 68 / 6)
    # Per source: ρ_peer = 8²/(2·8²) = 0.5 → ρ = (4·1 + 2·0.5)/6 = 5/6 = 0.83333 ≥ the local share 4/6
    assert ess_fraction_by_source(w, LOCAL4_PEER2) == pytest.approx(5 / 6)


def test_per_source_rho_of_an_all_zero_source_is_zero_not_nan():
    w = torch.tensor([1.0, 1.0, 1.0, 1.0, 0.0, 0.0])  # the peer claims log μ = 0: w̄ underflows to 0
    # Pooled: Σw = 4, Σw² = 4 → ESS = 4, ρ = 4/6 = 0.66667. Per source: ESS_peer = 0 (no
    # effective sample, its rows still count) → ρ = (4 + 0)/6 = 0.66667: the share bound, exactly
    rho = ess_fraction_by_source(w, LOCAL4_PEER2)
    assert rho == pytest.approx(4 / 6) and math.isfinite(rho)
    assert ess_fraction_by_source(torch.zeros(3), torch.tensor([0, 1, 1])) == 0.0


def test_per_source_rho_with_one_source_is_the_pooled_rho():
    w = torch.tensor([2.0, 1.0, 1.0, 0.0])
    # Σw = 4, Σw² = 6 → ρ = (16/6)/4 = 2/3, as test_ess_mixed_weights; any single id gives it
    assert ess_fraction_by_source(w, torch.full((4,), 7)) == pytest.approx(2 / 3)
    assert ess_fraction_by_source(w, torch.zeros(4, dtype=torch.long)) == pytest.approx(ess_fraction(w))


def test_per_source_rho_over_gradient_rows_and_two_peers():
    w = torch.tensor([1.0, 3.0, 1.0, 8.0, 0.0, 5.0, 2.0])
    src = torch.tensor([0, 0, 0, 2, 2, 9, 9])  # local, peer "2", peer "9" (ids need not be dense)
    rows = torch.tensor([True, False, True, True, True, True, True])  # row 1 carries no gradient
    # local rows 0, 2: w = [1, 1] → ESS 2; peer 2: [8, 0] → 64/64 = 1; peer 9: [5, 2] → 49/29
    # ρ = (2 + 1 + 49/29) / 6 = (3 + 1.68966)/6 = 0.78161
    assert ess_fraction_by_source(w, src, rows) == pytest.approx((3 + 49 / 29) / 6)
    # No row carries gradient → 1, as ess_fraction; no row at all → 0
    assert ess_fraction_by_source(w, src, torch.zeros(7, dtype=torch.bool)) == 1.0
    assert ess_fraction_by_source(torch.zeros(0), torch.zeros(0, dtype=torch.long)) == 0.0
    with pytest.raises(ValueError):
        ess_fraction_by_source(w, src[:3])


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_per_source_rho_on_cuda_with_cpu_ids():
    # Weights on the GPU, source ids and row mask built on the CPU: no device mismatch
    w = torch.tensor([1.0, 1.0, 1.0, 1.0, 8.0, 0.0], device="cuda")
    rows = torch.ones(6, dtype=torch.bool)
    assert ess_fraction_by_source(w, LOCAL4_PEER2, rows) == pytest.approx(5 / 6)
    assert ess_fraction_by_source(w, LOCAL4_PEER2.cuda(), rows.cuda()) == pytest.approx(5 / 6)


# --- lr_factor -----------------------------------------------------------------------------------

def test_lr_factor_rho_ref():
    # ρ_ref = 0.5: ρ = 0.25 → ρ/ρ_ref = 0.5 → sqrt 0.7071…, linear 0.5
    assert lr_factor(0.25, "sqrt", rho_ref=0.5) == pytest.approx(math.sqrt(0.5))
    assert lr_factor(0.25, "linear", rho_ref=0.5) == pytest.approx(0.5)
    # ρ = 0.75 ≥ ρ_ref = 0.5 → min(1, 1.5) = 1, no scaling
    assert lr_factor(0.75, "sqrt", rho_ref=0.5) == pytest.approx(1.0)
    assert lr_factor(0.75, "linear", rho_ref=0.5) == pytest.approx(1.0)
    # ρ = 1 → factor 1 under every rule
    assert lr_factor(1.0, "sqrt") == pytest.approx(1.0)


def test_lr_factor_count_rule_by_hand():
    # ESS 32 against a reference of 16: twice the effective samples, sqrt(2) further
    assert lr_factor(0.5, "count", ess=32, ess_ref=16, cap=2.0) == pytest.approx(math.sqrt(2))
    # a step with a quarter of the reference's effective rows goes half as far
    assert lr_factor(1.0, "count", ess=4, ess_ref=16, cap=2.0) == pytest.approx(0.5)
    # whatever peers send, never past the cap: 400 effective rows against 16 would be 5
    assert lr_factor(1.0, "count", ess=400, ess_ref=16, cap=2.0) == pytest.approx(2.0)
    assert lr_factor(1.0, "count", ess=400, ess_ref=16, cap=1.0) == pytest.approx(1.0)
    # no effective row: the floor
    assert lr_factor(0.0, "count", ess=0, ess_ref=16, floor=0.1) == pytest.approx(0.1)
    with pytest.raises(ValueError):
        lr_factor(1.0, "count", ess=None, ess_ref=16)
    with pytest.raises(ValueError):
        lr_factor(1.0, "count", ess=8, ess_ref=0)
    with pytest.raises(ValueError):
        lr_factor(1.0, "count", ess=8, ess_ref=8, cap=0.5)


def test_lr_factor_floor_and_none():
    # linear: ρ = 0.01 → 0.01, floored to 0.1
    assert lr_factor(0.01, "linear", floor=0.1) == pytest.approx(0.1)
    # sqrt: sqrt(0.04) = 0.2 > floor 0.1, floor inactive
    assert lr_factor(0.04, "sqrt", floor=0.1) == pytest.approx(0.2)
    # ρ = 0 with no floor → 0 (the update is frozen, which the user asked for)
    assert lr_factor(0.0, "sqrt") == 0.0
    # none rule ignores ρ
    assert lr_factor(0.01, "none") == 1.0
    assert lr_factor(0.25, "none", rho_ref=0.5) == 1.0


@pytest.mark.parametrize("kwargs", [
    dict(rho_ref=0.0),
    dict(rho_ref=-1.0),
    dict(floor=-0.1),
    dict(floor=1.5),
    dict(rule="cube"),
])
def test_lr_factor_invalid_args(kwargs):
    rule = kwargs.pop("rule", "sqrt")
    with pytest.raises(ValueError):
        lr_factor(0.5, rule, **kwargs)


# --- m2po_mask -----------------------------------------------------------------------------------

def test_m2po_drops_only_the_outlier():
    log_r = torch.tensor([[0.1, 0.2, 3.0]])
    mask = torch.ones(1, 3)
    # (log r)² = [0.01, 0.04, 9.0]; mean = 9.05/3 = 3.0167 > τ = 0.05
    # ascending prefix means: 0.01, (0.01+0.04)/2 = 0.025, 3.0167 → the largest k with mean ≤ 0.05
    # is k = 2: keep 0.1 and 0.2, drop 3.0
    kept = m2po_mask(log_r, mask, 0.05)
    assert kept.tolist() == [[1.0, 1.0, 0.0]]


def test_m2po_drops_several_tokens_in_order():
    log_r = torch.tensor([[0.3, 0.0, -0.5], [0.1, 0.0, 0.0]])
    mask = torch.ones(2, 3)
    # squares: [0.09, 0, 0.25, 0.01, 0, 0]; sorted: 0, 0, 0, 0.01, 0.09, 0.25
    # prefix sums 0, 0, 0, 0.01, 0.10, 0.35; means 0, 0, 0, 0.0025, 0.02, 0.0583
    # τ = 0.01 → k = 4 (0.02 > 0.01): drop 0.3 and -0.5, keep the rest
    kept = m2po_mask(log_r, mask, 0.01)
    assert kept.tolist() == [[0.0, 1.0, 0.0], [1.0, 1.0, 1.0]]


def test_m2po_respects_mask():
    # the huge value sits on padding: it must neither count towards the mean nor be "kept"
    log_r = torch.tensor([[0.1, 0.2, 50.0]])
    mask = torch.tensor([[1.0, 1.0, 0.0]])
    # live squares [0.01, 0.04]: mean 0.025 ≤ 0.05 → nothing dropped, mask returned as is
    kept = m2po_mask(log_r, mask, 0.05)
    assert kept.tolist() == [[1.0, 1.0, 0.0]]
    # τ = 0.02: prefix means 0.01, 0.025 → keep only the 0.1 token; padding stays 0
    kept = m2po_mask(log_r, mask, 0.02)
    assert kept.tolist() == [[1.0, 0.0, 0.0]]


def test_m2po_nothing_dropped_when_mean_below_tau():
    log_r = torch.tensor([[0.1, -0.1], [0.2, 0.0]])
    mask = torch.ones(2, 2)
    # squares 0.01, 0.01, 0.04, 0 → mean 0.06/4 = 0.015 ≤ τ = 0.015 (equality keeps everything)
    assert m2po_mask(log_r, mask, 0.015 + 1e-9).tolist() == [[1.0, 1.0], [1.0, 1.0]]
    assert m2po_mask(log_r, mask, 1.0).tolist() == [[1.0, 1.0], [1.0, 1.0]]


def test_m2po_empty_mask_and_negative_tau():
    log_r = torch.tensor([[5.0, 6.0]])
    mask = torch.zeros(1, 2)
    assert m2po_mask(log_r, mask, 0.0).tolist() == [[0.0, 0.0]]
    with pytest.raises(ValueError):
        m2po_mask(log_r, torch.ones(1, 2), -0.1)
