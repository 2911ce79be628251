"""The supervised term on peers' verified successes (``peer_sft_coef``, policies/supervised.py and
its place in policies/loss.py), on hand-made batches with hand-computed numbers."""

from __future__ import annotations

import math

import pytest
import torch

from swarm_node.policies.loss import LossConfig, LossInputs, loss_plan, policy_loss
from swarm_node.policies.supervised import row_nll, supervised_loss

L = math.log


def _inputs(logp, adv, *, mask=None, external=None, verified=None, supervised=None):
    """Rows with log μ = 0 (so log r = log π), a leaf ``logp`` to read gradients."""
    lp = torch.tensor(logp, dtype=torch.float32, requires_grad=True)
    B = lp.shape[0]
    flag = lambda v, default: torch.tensor(v) if v is not None else torch.full((B,), default)  # noqa: E731
    return LossInputs(
        logp=lp, behaviour_logp=torch.zeros_like(lp), behaviour_seq_logp=torch.zeros(B),
        mask=torch.ones_like(lp) if mask is None else torch.tensor(mask, dtype=torch.float32),
        advantages=torch.tensor(adv, dtype=torch.float32), sample_mask=torch.ones(B, dtype=torch.bool),
        sequence_level=torch.zeros(B, dtype=torch.bool), seq_weights=torch.ones(B),
        external=flag(external, True), verified=flag(verified, True),
        supervised=None if supervised is None else torch.tensor(supervised))


# Three rows of up to two tokens (row 1's second token is padding, its log-prob junk):
#   row 0  supervised, log π = ln 0.5, ln 0.25   mean NLL (ln 2 + ln 4)/2 = 1.5 ln 2
#   row 1  supervised, log π = ln 0.1, (pad)     mean NLL ln 10
#   row 2  not supervised
TINY = dict(logp=[[L(0.5), L(0.25)], [L(0.1), -50.0], [L(0.9), L(0.9)]], adv=[0.0, 0.0, 0.0],
            mask=[[1, 1], [1, 0], [1, 1]], supervised=[True, True, False])


def test_the_term_by_hand():
    x = _inputs(**TINY)
    assert row_nll(x.logp, x.mask, x.supervised).tolist() == pytest.approx([1.5 * L(2), L(10), 0.0], abs=1e-6)
    # coef 0.5, R = 4: 0.5/4 · (1.5 ln 2 + ln 10) = 0.125 · (1.039721 + 2.302585) = 0.417788
    s = supervised_loss(x.logp, x.mask, x.supervised, 0.5, 4)
    assert s.item() == pytest.approx(0.125 * (1.5 * L(2) + L(10)), abs=1e-6)
    assert s.item() == pytest.approx(0.417788, abs=1e-6)
    (g,) = torch.autograd.grad(s, x.logp)
    # ∂S/∂log π = −coef/(R·T_i) on a chosen row's tokens: −0.125/2 on row 0, −0.125 on row 1; 0 elsewhere
    assert g.flatten().tolist() == pytest.approx([-0.0625, -0.0625, -0.125, 0.0, 0.0, 0.0])


def test_in_the_loss_by_hand_with_zero_advantages():
    # A = 0 everywhere: the GRPO part is 0, so the loss is the term alone, and so are its metrics.
    cfg = LossConfig(peer_sft_coef=0.5, peer_sft_rows=4)
    out = policy_loss(_inputs(**TINY), cfg)
    assert out.loss.item() == pytest.approx(0.125 * (1.5 * L(2) + L(10)), abs=1e-6)
    assert out.metrics["peer_sft_rows"] == 2
    assert out.metrics["peer_sft_nll"] == pytest.approx((1.5 * L(2) + L(10)) / 2, abs=1e-6)


def test_it_adds_to_the_grpo_loss_by_hand():
    # One token a row, dapo over N = 3 tokens, ε = 0.2, ε_high = 0.28:
    #   row 0 a peer's, A = +1, r = 0.01: objective 0.01        supervised: NLL ln 100
    #   row 1 a peer's, A = −1, r = 0.01: objective −0.8 (clip)
    #   row 2 a peer's, A = +1, r = 0.5:  objective 0.5         supervised: NLL ln 2
    x = _inputs([[L(0.01)], [L(0.01)], [L(0.5)]], [1.0, -1.0, 1.0], supervised=[True, False, True])
    grpo = -(0.01 - 0.8 + 0.5) / 3
    out = policy_loss(x, LossConfig(peer_sft_coef=1.0, peer_sft_rows=8))
    assert out.loss.item() == pytest.approx(grpo + (L(100) + L(2)) / 8, abs=1e-6)
    (g,) = torch.autograd.grad(out.loss, x.logp)
    # GRPO's −r·A/N plus the term's −coef/(R·T) = −1/8 on the supervised rows
    assert g[:, 0].tolist() == pytest.approx([-0.01 / 3 - 1 / 8, 0.0, -0.5 / 3 - 1 / 8], abs=1e-7)


def test_off_is_the_grpo_loss_bit_for_bit():
    marked = dict(logp=[[L(0.01)], [L(0.01)], [L(0.5)]], adv=[1.0, -1.0, 1.0])
    plain = policy_loss(_inputs(**marked), LossConfig())
    # the default (coef 0) ignores marked rows entirely: same value, same metric keys
    off = policy_loss(_inputs(**marked, supervised=[True, False, True]), LossConfig())
    assert off.loss.item() == plain.loss.item() and off.metrics == plain.metrics
    assert "peer_sft_rows" not in off.metrics
    # on, with no row marked: the same loss, bit for bit
    on = policy_loss(_inputs(**marked, supervised=[False, False, False]), LossConfig(peer_sft_coef=2.0))
    assert on.loss.item() == plain.loss.item()
    assert on.metrics["peer_sft_rows"] == 0 and on.metrics["peer_sft_nll"] is None


def test_micro_batches_sum_to_the_batch():
    cfg = LossConfig(peer_sft_coef=0.5, peer_sft_rows=4)
    x = _inputs([[L(0.5), L(0.25)], [L(0.1), -50.0], [L(0.9), L(0.2)]], [1.0, -1.0, 0.5],
                mask=[[1, 1], [1, 0], [1, 1]], supervised=[True, True, False])
    whole = policy_loss(x, cfg).loss
    plan = loss_plan(x, cfg)
    parts = sum(policy_loss(x.rows(torch.tensor(idx)), cfg, plan.rows(torch.tensor(idx))).loss
                for idx in ([0], [1, 2]))
    assert parts.item() == pytest.approx(whole.item(), abs=1e-6)


@pytest.mark.parametrize("bad, words", [
    (dict(supervised=[True, True, True], external=[True, True, True]), "more than peer_sft_rows = 2"),
    (dict(supervised=[True, False, False], external=[False, True, True]), "not a peer's row this node verified"),
    (dict(supervised=[False, True, False], verified=[True, False, True]), "not a peer's row this node verified"),
])
def test_rows_past_the_bounds_are_refused(bad, words):
    """The node chooses the rows (node/run/peer_sft.py); the loss holds it to what it chose by:
    at most R rows, each a peer's row this node verified."""
    x = _inputs([[L(0.5)], [L(0.5)], [L(0.5)]], [0.0, 0.0, 0.0], **bad)
    with pytest.raises(ValueError, match=words):
        policy_loss(x, LossConfig(peer_sft_coef=1.0, peer_sft_rows=2))


@pytest.mark.parametrize("kw, words", [(dict(peer_sft_coef=-1.0), "peer_sft_coef"),
                                       (dict(peer_sft_coef=math.inf), "peer_sft_coef"),
                                       (dict(peer_sft_rows=0), "peer_sft_rows")])
def test_bad_settings_are_refused(kw, words):
    with pytest.raises(ValueError, match=words):
        LossConfig(**kw)


def test_term_only_rows_are_left_out_of_the_grpo_diagnostics():
    """Rows in the batch for the term alone (``term_only``) count in no GRPO diagnostic: the metrics
    are those of the other rows by themselves, the term's own metrics those of every marked row."""
    cfg = LossConfig(peer_sft_coef=1.0, peer_sft_rows=4)
    logp = [[L(0.9)], [L(0.3)], [L(0.5)]]
    both = _inputs(logp, [1.0, 0.0, 0.0], supervised=[False, True, True])
    both.behaviour_logp = torch.tensor([[L(0.5)], [L(0.6)], [L(0.1)]])  # r = 1.8 (clipped, A > 0), 0.5, 5
    both.term_only = torch.tensor([False, True, True])
    alone = both.rows(torch.tensor([0]))
    alone.term_only = alone.supervised = None
    got, want = loss_plan(both, cfg).metrics, loss_plan(alone, LossConfig()).metrics
    assert got["clip_frac"] == 1.0 and got["ratio_mean"] == pytest.approx(1.8)
    assert {k: got[k] for k in want} == want
    assert got["peer_sft_rows"] == 2
