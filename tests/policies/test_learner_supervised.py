"""The learner's supervised term on a tiny model (``LossConfig.peer_sft_coef``): off, marked rows
change nothing; on, the loss is the GRPO loss plus the term computed by hand from the policy's own
log-probs, a peer group GRPO leaves out (all right: every advantage 0) is learned from through the
term alone, and micro-batches give the whole batch's gradient."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from swarm_node.policies.learner import Learner, TrainSample
from swarm_node.policies.loss import LossConfig
from swarm_node.policies.policy import Policy, SamplingParams, TokenBatch

pytestmark = pytest.mark.usefixtures("one_torch_thread")

PROMPTS = ["What is 2+3?", "Count the letter a in banana."]
G = 3
ON = LossConfig(peer_sft_coef=0.5, peer_sft_rows=4)


@pytest.fixture(scope="module")
def rollouts(tiny_model_dir):
    policy = Policy.load(tiny_model_dir)
    torch.manual_seed(0)
    return policy.generate(PROMPTS, G, SamplingParams(max_new_tokens=6))


def _batch(rollouts, marked=(3, 4)):
    """Prompt 0 this node's (rewards 1, 0, 0: it carries gradient); prompt 1 a peer's, all three
    verified right (1.1 each: GRPO learns nothing from it), rows ``marked`` chosen for the term."""
    out = []
    for i, grp in enumerate(rollouts):
        for g, c in enumerate(grp):
            k = i * G + g
            peer = i == 1
            out.append(TrainSample(group="peer/1/t1" if peer else "t0", prompt_ids=c.prompt_ids,
                                   completion_ids=c.completion_ids, behaviour_logprobs=c.logprobs,
                                   behaviour_seq_logprob=c.seq_logprob, reward=1.1 if peer else float(g == 0),
                                   local=not peer, source="peer" if peer else None, verified=peer,
                                   supervised=k in marked))
    return out


def _step(tiny_model_dir, samples, **kw):
    torch.manual_seed(0)
    policy = Policy.load(tiny_model_dir)
    learner = Learner(policy, warmup_steps=0, learning_rate=1e-2, max_grad_norm=1e9, **kw)
    m = learner.step(samples)
    return m, [p.grad.clone() for p in learner.params], [p.detach().clone() for p in policy.model.parameters()]


def _hand_term(tiny_model_dir, samples, coef, rows):
    """coef / R · Σ over the marked rows of their mean −log π_θ, from a fresh copy's forward pass."""
    policy = Policy.load(tiny_model_dir)
    policy.learning_mode()
    nll = []
    with torch.no_grad():
        for s in samples:
            if s.supervised:
                batch = TokenBatch.build([s.prompt_ids], [s.completion_ids], policy.tokenizer.pad_token_id)
                nll.append(-float(policy.completion_logprobs(batch).sum()) / len(s.completion_ids))
    return coef / rows * sum(nll), sum(nll) / len(nll)


def test_off_by_default_marked_rows_change_nothing(tiny_model_dir, rollouts):
    plain = [dataclasses.replace(s, supervised=False) for s in _batch(rollouts)]
    m_marked, g_marked, w_marked = _step(tiny_model_dir, _batch(rollouts))
    m_plain, g_plain, w_plain = _step(tiny_model_dir, plain)
    assert m_marked == m_plain and "peer_sft_rows" not in m_marked
    assert all(torch.equal(a, b) for a, b in zip(g_marked, g_plain))
    assert all(torch.equal(a, b) for a, b in zip(w_marked, w_plain))


def test_on_the_loss_is_grpo_plus_the_term_by_hand(tiny_model_dir, rollouts):
    samples = _batch(rollouts)
    m_off, _, _ = _step(tiny_model_dir, samples)
    m_on, _, _ = _step(tiny_model_dir, samples, loss=ON)
    term, nll = _hand_term(tiny_model_dir, samples, 0.5, 4)
    assert m_on["loss"] == pytest.approx(m_off["loss"] + term, abs=1e-5)
    assert m_on["peer_sft_rows"] == 2 and m_on["peer_sft_nll"] == pytest.approx(nll, abs=1e-5)
    # the peer group is inert for GRPO: off, all 3 of its rows are left out of the passes; on, the
    # 2 marked rows go through them (the third is still left out), and nothing about ESS changes
    assert m_off["inert_rows_skipped"] == 3 and m_on["inert_rows_skipped"] == 1
    for key in ("ess", "rho", "grad_rows", "lr_factor", "adv_abs_mean", "zero_adv_frac"):
        assert m_on[key] == pytest.approx(m_off[key], abs=1e-6), key


def test_a_group_grpo_cannot_learn_from_is_learned_through_the_term(tiny_model_dir, rollouts):
    """Only the peer's all-right group: no row carries GRPO gradient. Off, no pass runs and the
    weights stay; on, the term alone moves them."""
    peer_only = _batch(rollouts)[G:]
    m_off, _, w_off = _step(tiny_model_dir, peer_only)
    m_on, g_on, w_on = _step(tiny_model_dir, peer_only, loss=ON)
    assert m_off["passes"] == 0 and m_off["grad_norm"] == 0.0
    assert m_on["passes"] == 1 and m_on["grad_norm"] > 0
    assert m_on["loss"] == pytest.approx(_hand_term(tiny_model_dir, peer_only, 0.5, 4)[0], abs=1e-5)
    assert any(not torch.equal(a, b) for a, b in zip(w_on, w_off))


@pytest.mark.parametrize("kw", [dict(micro_batch_size=1), dict(micro_batch_tokens=12)], ids=["rows", "tokens"])
def test_micro_batches_give_the_batchs_gradient(tiny_model_dir, rollouts, kw):
    samples = _batch(rollouts)
    m_whole, g_whole, _ = _step(tiny_model_dir, samples, loss=ON)
    m_parts, g_parts, _ = _step(tiny_model_dir, samples, loss=ON, **kw)
    assert m_parts["passes"] > 1
    assert m_parts["loss"] == pytest.approx(m_whole["loss"], abs=1e-5)
    top = max(float(g.abs().max()) for g in g_whole)
    for a, b in zip(g_parts, g_whole):
        torch.testing.assert_close(a, b, atol=1e-5 * top, rtol=1e-4)


LR = 1e-2


def _moved(tiny_model_dir, samples, coef: float, rows: int):
    """One step from fresh weights and a fresh Adam (no history: the reviewer's case); its metrics
    and how far it moved the weights: max |Δw| and ‖Δw‖."""
    torch.manual_seed(0)
    policy = Policy.load(tiny_model_dir)
    before = [p.detach().clone() for p in policy.model.parameters()]
    learner = Learner(policy, warmup_steps=0, learning_rate=LR, loss=LossConfig(peer_sft_coef=coef, peer_sft_rows=rows))
    m = learner.step(samples)
    dw = [p.detach() - b for p, b in zip(policy.model.parameters(), before)]
    return m, max(float(d.abs().max()) for d in dw), float(torch.sqrt(sum((d.double() ** 2).sum() for d in dw)))


def test_the_term_alone_moves_the_weights_by_its_share_of_a_step(tiny_model_dir, rollouts):
    """Only the peer's all-right group: the term is the step's only gradient. Adam divides the
    gradient by its size, so without lr_scale coef and R bounded nothing in update space (max |Δw|
    was the learning rate for 3 rows at coef 1, 1 row at coef 1 and 1 row at coef 0.01 alike). With
    it, the step moves the weights min(1, coef) × rows / R of a full step: R = 3 here, so 3 rows at
    coef 1 are a full step, 1 row a third, and coef 0.01 a hundredth of that."""
    peer = _batch(rollouts)[G:]
    mark = lambda n: [dataclasses.replace(s, supervised=k < n) for k, s in enumerate(peer)]  # noqa: E731
    full_m, full, full_norm = _moved(tiny_model_dir, mark(3), 1.0, 3)
    assert full_m["grad_rows"] == 0 and full_m["peer_sft_lr_scale"] == 1.0
    assert full == pytest.approx(LR, rel=1e-3)  # Adam's first step: |Δw| = lr wherever the gradient is not ~0
    for coef, n in [(1.0, 1), (0.01, 3), (0.01, 1), (4.0, 1)]:
        m, moved, norm = _moved(tiny_model_dir, mark(n), coef, 3)
        share = min(1.0, coef) * n / 3
        assert m["peer_sft_lr_scale"] == pytest.approx(share) and m["lr"] == pytest.approx(LR * share)
        # (rel 1e-2: a float32 weight of about 1 holds a step of 3e-5 to within 1.2e-7)
        assert moved == pytest.approx(LR * share, rel=1e-2), (coef, n)
        assert norm <= full_norm * share * 1.01, (coef, n)  # and so is the whole update's size
    # a coef above 1 weighs more against GRPO on a mixed step, never more than a full step alone
    assert _moved(tiny_model_dir, mark(3), 4.0, 3)[1] == pytest.approx(full, rel=1e-3)


def test_a_step_with_grpo_gradient_is_not_scaled(tiny_model_dir, rollouts):
    """Beside a GRPO group, the term weighs coef against the GRPO gradient; the step's LR is the
    GRPO step's, as with the switch off."""
    samples = _batch(rollouts)
    m_off, _, _ = _step(tiny_model_dir, samples)
    m_on, _, _ = _step(tiny_model_dir, samples, loss=ON)
    assert m_on["grad_rows"] > 0 and m_on["peer_sft_lr_scale"] == 1.0
    assert m_on["lr"] == m_off["lr"] and m_on["lr_factor"] == m_off["lr_factor"]


DIAGNOSTICS = ("clip_frac", "m2po_masked_frac", "ratio_mean", "weight_mean", "seq_level_frac", "ext_pos_rows",
               "ext_pos_frac", "ext_pos_weight_mean", "ext_pos_low_frac", "ext_pos_floored_frac", "ext_pos_ess")


def _off_policy(samples):
    """The batch with ratios away from 1: this node's rows sampled by a μ 0.5 nats a token less
    likely (r_t = e^0.5 > 1 + ε_high: clipped where A > 0), the peer's from another tokenizer
    (sequence level) with a Σ log μ 1 nat lower (w̄ = e > 1)."""
    out = []
    for s in samples:
        if s.local:
            out.append(dataclasses.replace(s, behaviour_logprobs=tuple(v - 0.5 for v in s.behaviour_logprobs),
                                           behaviour_seq_logprob=s.behaviour_seq_logprob - 0.5 * len(s.completion_ids)))
        else:
            out.append(dataclasses.replace(s, behaviour_logprobs=None, behaviour_seq_logprob=s.behaviour_seq_logprob - 1))
    return out


@pytest.mark.parametrize("peer_only", [False, True], ids=["beside-grpo", "term-alone"])
def test_the_grpo_diagnostics_are_the_same_on_and_off(tiny_model_dir, rollouts, peer_only):
    """The marked rows of an all-right peer group go through the passes with the term on and are left
    out with it off; the GRPO diagnostics leave them out, so they are those of the same GRPO rows
    (counted, the peer rows were 2 of 5 rows at sequence level: seq_level_frac 0.4 against 0)."""
    samples = _off_policy(_batch(rollouts))
    samples = samples[G:] if peer_only else samples
    m_off, _, _ = _step(tiny_model_dir, samples)
    m_on, _, _ = _step(tiny_model_dir, samples, loss=ON)
    assert m_on["peer_sft_rows"] == 2 and m_off["inert_rows_skipped"] == 3 and m_on["inert_rows_skipped"] == 1
    if not peer_only:  # the batch really is off-policy: something to get wrong
        assert m_off["clip_frac"] > 0 and m_off["ratio_mean"] > 1.2 and m_off["seq_level_frac"] == 0
    for key in DIAGNOSTICS:
        assert m_on[key] == pytest.approx(m_off[key], abs=1e-6), key
