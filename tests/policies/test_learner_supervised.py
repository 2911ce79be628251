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
