"""Peers' successes: the ``external_success_floor`` weights, their gradient and the ext_pos_* metrics,
on hand-made batches with hand-computed numbers (policies/loss.py, policies/offpolicy.py)."""

from __future__ import annotations

import math

import pytest
import torch

from swarm_node.policies.loss import LossConfig, LossInputs, loss_plan, policy_loss
from swarm_node.policies.offpolicy import success_floor

L = math.log
OFF = LossConfig()
F = LossConfig(external_success_floor=0.25)


def _inputs(log_r, adv, external, *, seq_level=None, w=None, mask=None, verified=None):
    """Rows of tokens with log π − log μ = ``log_r`` (log μ = 0), a leaf ``logp`` to read gradients;
    every row verified (right, one answer block) unless ``verified`` says otherwise."""
    logp = torch.tensor(log_r, dtype=torch.float32, requires_grad=True)
    B = logp.shape[0]
    return LossInputs(
        logp=logp, behaviour_logp=torch.zeros_like(logp), behaviour_seq_logp=torch.zeros(B),
        mask=torch.ones_like(logp) if mask is None else torch.tensor(mask, dtype=torch.float32),
        advantages=torch.tensor(adv, dtype=torch.float32), sample_mask=torch.ones(B, dtype=torch.bool),
        sequence_level=torch.zeros(B, dtype=torch.bool) if seq_level is None else torch.tensor(seq_level),
        seq_weights=torch.ones(B) if w is None else torch.tensor(w, dtype=torch.float32),
        external=None if external is None else torch.tensor(external),
        verified=torch.ones(B, dtype=torch.bool) if verified is None else torch.tensor(verified))


def _loss_and_grad(x, cfg):
    out = policy_loss(x, cfg)
    (g,) = torch.autograd.grad(out.loss, x.logp)
    return out.loss.item(), g, out.metrics


# One token a row, ε = 0.2, ε_high = 0.28, δ = 4, dapo (N = 5 tokens):
#   row 0  a peer's, A = +1, r = 0.01   the case the floor is for
#   row 1  a peer's, A = −1, r = 0.01   negative: untouched
#   row 2  own,      A = +1, r = 0.01   own: untouched
#   row 3  a peer's, A = +1, r = 0.5    already above f: untouched
#   row 4  a peer's, A = +2, r = 2.0    clipped at 1 + ε_high: untouched
BATCH = dict(log_r=[[L(0.01)], [L(0.01)], [L(0.01)], [L(0.5)], [L(2.0)]], adv=[1.0, -1.0, 1.0, 1.0, 2.0],
             external=[True, True, False, True, True])


def test_the_weight_function_by_hand():
    w = torch.tensor([0.01, 0.01, 0.5, 2.0])
    rows = torch.tensor([True, False, True, True])
    out, lifted = success_floor(w, 0.25, rows)
    assert out.tolist() == pytest.approx([0.25, 0.01, 0.5, 2.0])
    assert lifted.tolist() == [True, False, False, False]
    # per-row floors (bounded by per-row caps)
    out, _ = success_floor(w, torch.tensor([0.25, 0.25, 0.3, 0.3]), torch.ones(4, dtype=torch.bool))
    assert out.tolist() == pytest.approx([0.25, 0.25, 0.5, 2.0])


def test_off_is_the_old_loss_by_hand():
    loss, g, _ = _loss_and_grad(_inputs(**BATCH), OFF)
    # objectives: min(0.01, 0.8)·1 = 0.01; min(−0.01, −0.8) = −0.8 (clipped); 0.01; 0.5; min(4, 2.56) = 2.56
    assert loss == pytest.approx(-(0.01 - 0.8 + 0.01 + 0.5 + 2.56) / 5, abs=1e-6)
    # ∂/∂logp = −r·A/N where the unclipped term is in charge, 0 where the clip is
    assert g[:, 0].tolist() == pytest.approx([-0.01 / 5, 0.0, -0.01 / 5, -0.5 / 5, 0.0], abs=1e-7)


def test_the_floor_lifts_only_a_peers_positive_row_by_hand():
    loss, g, m = _loss_and_grad(_inputs(**BATCH), F)
    # row 0's weight is max(0.01, 0.25) = 0.25: value 0.25·A, gradient 0.25·A·∇log π
    assert loss == pytest.approx(-(0.25 - 0.8 + 0.01 + 0.5 + 2.56) / 5, abs=1e-6)
    assert g[:, 0].tolist() == pytest.approx([-0.25 / 5, 0.0, -0.01 / 5, -0.5 / 5, 0.0], abs=1e-7)
    # peers' successes: rows 0, 3, 4; tokens 0.01, 0.5, 2.0 (raw ratios), the floor lifted one
    assert m["ext_pos_rows"] == 3 and m["ext_pos_frac"] == pytest.approx(3 / 5)
    assert m["ext_pos_weight_mean"] == pytest.approx((0.01 + 0.5 + 2.0) / 3, abs=1e-6)
    assert m["ext_pos_low_frac"] == pytest.approx(2 / 3)
    assert m["ext_pos_floored_frac"] == pytest.approx(1 / 3)


def test_a_positive_row_this_node_did_not_verify_is_never_lifted():
    """The sender composes its group: a wrong but well-formed answer among malformed ones, or a right
    answer wrapped in other text, has A > 0 without being verified, and keeps its small ratio."""
    x = _inputs(**BATCH, verified=[False, True, True, True, True])
    loss, g, m = _loss_and_grad(x, F)
    assert loss == pytest.approx(-(0.01 - 0.8 + 0.01 + 0.5 + 2.56) / 5, abs=1e-6)  # the old loss
    assert g[0, 0].item() == pytest.approx(-0.01 / 5, abs=1e-7)
    assert m["ext_pos_rows"] == 2 and m["ext_pos_floored_frac"] == 0.0  # rows 3 and 4 only
    unknown = _inputs(**BATCH)
    unknown.verified = None  # a caller that says nothing verifies nothing
    assert _loss_and_grad(unknown, F)[0] == pytest.approx(loss, abs=1e-6)


def test_f_1_lifts_to_1_and_the_floor_never_passes_the_upper_bounds():
    x = _inputs(**BATCH)
    _, g, _ = _loss_and_grad(x, LossConfig(external_success_floor=1.0))
    # rows 0 and 3 lifted to 1 (≤ 1 + ε_high); row 4 (clipped above) still has no gradient
    assert g[:, 0].tolist() == pytest.approx([-1 / 5, 0.0, -0.01 / 5, -1 / 5, 0.0], abs=1e-7)
    # δ = 0.5 below f = 0.9: the floor is min(f, δ) = 0.5 (row 3's r = 0.5 is not below it)
    _, g, _ = _loss_and_grad(_inputs(**BATCH), LossConfig(external_success_floor=0.9, delta=0.5))
    assert g[0, 0].item() == pytest.approx(-0.5 / 5, abs=1e-7)
    assert g[3, 0].item() == pytest.approx(-0.5 / 5, abs=1e-7)


def test_sequence_level_rows_floor_the_sequence_weight_within_the_cap():
    # two tokens a row, all sequence-level: w̄ = 0.01 (peer, A = +1), 0.01 (peer, A = −1), 0.01 (own, A = +1)
    x = _inputs([[0.0, 0.0]] * 3, [1.0, -1.0, 1.0], [True, True, False],
                seq_level=[True] * 3, w=[0.01, 0.01, 0.01])
    _, g, m = _loss_and_grad(x, F)
    # ∂/∂logp_t = −w·A/N, N = 6: row 0 −0.25/6, row 1 +0.01/6, row 2 −0.01/6
    assert g.flatten().tolist() == pytest.approx([-0.25 / 6] * 2 + [0.01 / 6] * 2 + [-0.01 / 6] * 2, abs=1e-7)
    assert m["ext_pos_floored_frac"] == 1.0 and m["ext_pos_weight_mean"] == pytest.approx(0.01)
    # never above the row's cap: with importance_sampling_level "sequence" and c = 0.1, f = 0.25 gives 0.1
    cfg = LossConfig(external_success_floor=0.25, importance_sampling_level="sequence", weight_cap=0.1)
    _, g, _ = _loss_and_grad(_inputs([[0.0, 0.0]] * 3, [1.0, -1.0, 1.0], [True, True, False],
                                     w=[0.01, 0.01, 0.01]), cfg)
    assert g[0].tolist() == pytest.approx([-0.1 / 6] * 2, abs=1e-7)


def test_on_without_peers_successes_is_the_old_loss_exactly():
    torch.manual_seed(0)
    log_r = (torch.randn(4, 5) * 2).tolist()
    for external, adv in ((None, [1.0, -1.0, 0.5, 2.0]), ([False] * 4, [1.0, -1.0, 0.5, 2.0]),
                          ([True] * 4, [-1.0, -1.0, -0.5, 0.0])):
        a = _loss_and_grad(_inputs(log_r, adv, external), OFF)
        b = _loss_and_grad(_inputs(log_r, adv, external), F)
        assert a[0] == b[0] and torch.equal(a[1], b[1])


def test_micro_batches_sum_to_the_whole_batch_with_the_floor():
    x = _inputs(**BATCH)
    whole = policy_loss(x, F).loss
    plan = loss_plan(x, F)
    parts = sum(policy_loss(x.rows(sl), F, plan.rows(sl)).loss for sl in (slice(0, 2), slice(2, 5)))
    assert parts.item() == pytest.approx(whole.item(), abs=1e-7)


def test_the_metrics_on_a_hand_made_batch():
    # two tokens a row:
    #   row 0  peer, A = +1, token ratios 0.01, 1.0, w̄ = 0.2
    #   row 1  peer, A = +1, sequence-level, w̄ = 0.5
    #   row 2  peer, A = −1; row 3 own, A = +1; row 4 peer, A = 0: none of them count
    x = _inputs([[L(0.01), 0.0], [0.0, 0.0], [L(0.01), L(0.01)], [L(0.01), 0.0], [0.0, 0.0]],
                [1.0, 1.0, -1.0, 1.0, 0.0], [True, True, True, False, True],
                seq_level=[False, True, False, False, False], w=[0.2, 0.5, 1.0, 1.0, 1.0])
    m = loss_plan(x, OFF).metrics
    assert m["ext_pos_rows"] == 2 and m["ext_pos_frac"] == pytest.approx(2 / 5)
    # their tokens' weights: 0.01, 1.0 (ratios), 0.5, 0.5 (row 1's w̄ on each token)
    assert m["ext_pos_weight_mean"] == pytest.approx((0.01 + 1.0 + 0.5 + 0.5) / 4, abs=1e-6)
    assert m["ext_pos_low_frac"] == pytest.approx(3 / 4)  # below 1 − ε = 0.8
    assert m["ext_pos_floored_frac"] == 0.0
    # ESS fraction of w̄ = [0.2, 0.5]: 0.7² / (0.04 + 0.25) / 2
    assert m["ext_pos_ess"] == pytest.approx(0.49 / 0.29 / 2, abs=1e-6)
    assert loss_plan(x, LossConfig(external_success_floor=0.6)).metrics["ext_pos_floored_frac"] == pytest.approx(3 / 4)
    # no peers' successes: counts 0, the rest null
    m = loss_plan(_inputs([[0.0]], [1.0], None), OFF).metrics
    assert (m["ext_pos_rows"], m["ext_pos_frac"]) == (0.0, 0.0)
    assert all(m[k] is None for k in ("ext_pos_weight_mean", "ext_pos_low_frac", "ext_pos_floored_frac", "ext_pos_ess"))


@pytest.mark.parametrize("f", [0.0, -0.5, 1.5])
def test_the_floor_must_be_in_0_1(f):
    with pytest.raises(ValueError, match=r"external_success_floor must be in \(0, 1\]"):
        LossConfig(external_success_floor=f)


# --------------------------------------------------------------------------- through the learner

def test_the_learner_reports_peers_successes_and_applies_the_floor(tiny_model_dir):
    """Prompt 1's group is a peer's whose claimed log μ is ln 100 above the truth on every token, so
    each of its token ratios is 0.01 on the learner's first pass (on-policy otherwise)."""
    from swarm_node.policies.learner import Learner, TrainSample
    from swarm_node.policies.policy import Policy, SamplingParams

    torch.manual_seed(0)
    rollouts = Policy.load(tiny_model_dir).generate(["What is 2+3?", "Count the a in banana."], 3,
                                                    SamplingParams(max_new_tokens=6))
    rewards = [1, 0, 0, 0, 1, 1]  # p1 mean 2/3: its rows 4 and 5 have A = +1/3, row 3 −2/3

    def samples():
        out = []
        for k, c in enumerate(c for grp in rollouts for c in grp):
            peer = k >= 3
            beh = tuple(v + L(100) for v in c.logprobs) if peer else c.logprobs
            out.append(TrainSample(group=f"p{k // 3}", prompt_ids=c.prompt_ids, completion_ids=c.completion_ids,
                                   behaviour_logprobs=beh, behaviour_seq_logprob=sum(beh), reward=float(rewards[k]),
                                   local=not peer, source="peer" if peer else None,
                                   verified=peer and rewards[k] == 1))
        return out

    def step(cfg):
        torch.manual_seed(0)
        return Learner(Policy.load(tiny_model_dir), learning_rate=1e-3, warmup_steps=0, loss=cfg).step(samples())

    off, on = step(OFF), step(F)
    for m in (off, on):
        assert m["ext_pos_rows"] == 2 and m["ext_pos_frac"] == pytest.approx(2 / 6)
        assert m["ext_pos_weight_mean"] == pytest.approx(0.01, rel=1e-3) and m["ext_pos_low_frac"] == 1.0
    assert (off["ext_pos_floored_frac"], on["ext_pos_floored_frac"]) == (0.0, 1.0)
    # the two rows' objective rises from 0.01·A to 0.25·A per token: the loss falls
    assert on["loss"] < off["loss"]
