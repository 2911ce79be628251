"""Rows of all-equal groups are left out of the learner's passes (policies/inert_rows.py): the
update is the one the learner makes with them, to float rounding, under each baseline, loss
aggregation and micro-batch size; a batch with no live row runs no pass at all."""

from __future__ import annotations

import pytest
import torch

import swarm_node.policies.learner as learner_mod
from swarm_node.policies.inert_rows import live_rows, skippable, whole_batch_denominator
from swarm_node.policies.learner import Learner, TrainSample
from swarm_node.policies.loss import LossConfig
from swarm_node.policies.policy import Policy, SamplingParams

pytestmark = pytest.mark.usefixtures("one_torch_thread")

PROMPTS = ["What is 2+3?", "Count the letter a in banana.", "7-4=", "Reverse abc."]
G = 3


@pytest.fixture(scope="module")
def rollouts(tiny_model_dir):
    policy = Policy.load(tiny_model_dir)
    torch.manual_seed(0)
    return policy.generate(PROMPTS, G, SamplingParams(max_new_tokens=6))


def _samples(rollouts, rewards, peers: bool = False):
    """Prompts 0-1 this node's; with ``peers``, prompts 2-3 a peer's: 2 on the token path (its
    log-probs claimed 0.3 lower: off-policy), 3 with another tokenizer (sequence path)."""
    flat = [(i, c) for i, grp in enumerate(rollouts) for c in grp]
    out = []
    for (i, c), r in zip(flat, rewards):
        peer = peers and i >= 2
        beh = None if peer and i == 3 else tuple(v - (0.3 if peer else 0.0) for v in c.logprobs)
        out.append(TrainSample(group=f"peer/p{i}" if peer else f"p{i}", prompt_ids=c.prompt_ids,
                               completion_ids=c.completion_ids, behaviour_logprobs=beh,
                               behaviour_seq_logprob=c.seq_logprob - (0.3 * len(c.logprobs) if peer else 0.0),
                               reward=float(r), local=not peer, source="peer" if peer else None,
                               verified=peer and r >= 1.0))
    return out


def _train(tiny_model_dir, samples_per_step, skip: bool, monkeypatch, **kw):
    """Weights and metrics after one step per batch, inert rows left out or not."""
    monkeypatch.setattr(learner_mod, "skippable", (lambda *a: skippable(*a)) if skip else (lambda *a: False))
    torch.manual_seed(0)
    policy = Policy.load(tiny_model_dir)
    # No clipping: a wrong scale of the gradient (a wrong denominator) must show in it.
    learner = Learner(policy, warmup_steps=0, learning_rate=1e-2, max_grad_norm=1e9, **kw)
    metrics, grads = [], []
    for s in samples_per_step:
        metrics.append(learner.step(s))
        grads.append([p.grad.clone() for p in learner.params])
    return grads, [p.detach().clone() for p in policy.model.parameters()], metrics


def test_live_rows_are_those_of_groups_whose_rewards_differ():
    r = torch.tensor([1.0, 1.0, 1.0, 0.0, 1.0, 0.0, 0.1, 0.1])
    g = torch.tensor([0, 0, 0, 1, 1, 1, 2, 2])
    assert live_rows(r, g).tolist() == [False] * 3 + [True] * 3 + [False] * 2
    assert skippable("mean", "group", LossConfig()) and skippable("opob_approx", "none", LossConfig())
    assert not skippable("mean", "batch", LossConfig()) and not skippable("opob", "none", LossConfig())
    assert not skippable("mean", "none", LossConfig(m2po_tau=0.04))


def test_the_whole_batch_denominator_counts_inert_rows_and_leaves_pivots_out():
    mask = torch.tensor([[1, 1, 0], [1, 0, 0], [1, 1, 1], [1, 1, 0]], dtype=torch.float32)
    r, g = torch.tensor([0.0, 0.0, 1.0, 0.0]), torch.tensor([0, 0, 1, 1])
    assert float(whole_batch_denominator(mask, r, g, "mean", "none", LossConfig())[0]) == 8  # dapo: every token
    assert float(whole_batch_denominator(mask, r, g, "mean", "none", LossConfig(loss_type="grpo"))[0]) == 4
    # MC-GRPO: one pivot a group (the first of equal medians, torch.median's index) is left out.
    denom, keep = whole_batch_denominator(mask, r, g, "median", "none", LossConfig())
    assert keep.sum() == 2 and float(denom) == float((mask * keep.unsqueeze(-1)).sum())


@pytest.mark.parametrize("kw", [dict(), dict(baseline="median"), dict(baseline="opob_approx"),
                                dict(loss=LossConfig(loss_type="grpo")),
                                dict(loss=LossConfig(loss_type="dr_grpo", max_completion_length=6)),
                                dict(micro_batch_size=2), dict(scale_rewards="group"), dict(num_iterations=2),
                                dict(off_policy_correction=False),
                                dict(loss=LossConfig(external_success_floor=0.5)),
                                dict(loss=LossConfig(importance_sampling_level="sequence"))],
                         ids=["mean", "median", "opob_approx", "grpo", "dr_grpo", "micro2", "scale_group", "mu2",
                              "naive", "success_floor", "sequence_level"])
@pytest.mark.parametrize("peers", [False, True], ids=["own", "with_peers"])
def test_leaving_inert_rows_out_changes_nothing_of_the_update(tiny_model_dir, rollouts, monkeypatch, kw, peers):
    # Inert groups (all 1 / all 0) beside live ones, a peer's among both; then a batch with no
    # live row, which still steps Adam on its momentum, as a backward pass's zeros would.
    steps = [_samples(rollouts, [1, 1, 1, 0, 1, 0, 0, 0, 0, 1, 0, 1], peers),
             _samples(rollouts, [1] * 6 + [0] * 6, peers)]
    steps[0][6:9] = _samples(rollouts, [0] * 6 + [1, 1, 1] + [0] * 3, peers)[6:9]  # prompt 2 inert, all right
    g_all, w_all, m_all = _train(tiny_model_dir, steps, False, monkeypatch, **kw)
    g_live, w_live, m_live = _train(tiny_model_dir, steps, True, monkeypatch, **kw)
    # The gradients agree to float rounding (the passes see other padding widths); Adam divides
    # by their running size, so weights whose gradient is ~0 may move by rounding: looser there.
    for step_live, step_all in zip(g_live, g_all):
        top = max(float(g.abs().max()) for g in step_all) or 1.0
        for a, b in zip(step_live, step_all):
            torch.testing.assert_close(a, b, atol=1e-5 * top, rtol=1e-4)
    assert all(not bool(g.any()) for g in g_live[1])  # the second batch: exactly no gradient
    for p, q in zip(w_live, w_all):
        torch.testing.assert_close(p, q, atol=1e-4, rtol=1e-3)
    assert m_live[0]["inert_rows_skipped"] == 6 and m_live[1]["inert_rows_skipped"] == 12
    assert m_all[0]["inert_rows_skipped"] == 0
    assert m_live[0]["grad_norm"] == pytest.approx(m_all[0]["grad_norm"], rel=1e-4) and m_all[0]["grad_norm"] > 0
    for key in ("zero_adv_frac", "adv_abs_mean", "reward_mean", "batch_size", "completion_len", "rho", "lr", "ess",
                "behaviour_rho", "grad_rows", "grad_sources", "rho_pooled"):
        for a, b in zip(m_live, m_all):
            assert a[key] == pytest.approx(b[key], abs=1e-5), key
    assert m_live[0]["loss"] == pytest.approx(m_all[0]["loss"], abs=1e-6)


def test_a_batch_with_nothing_to_learn_runs_no_forward_pass(tiny_model_dir, rollouts, monkeypatch):
    torch.manual_seed(0)
    policy = Policy.load(tiny_model_dir)
    calls = []
    real = policy.completion_logprobs
    monkeypatch.setattr(policy, "completion_logprobs", lambda *a, **k: calls.append(1) or real(*a, **k))
    learner = Learner(policy, warmup_steps=0, learning_rate=1e-2)
    m = learner.step(_samples(rollouts, [0.1] * 12))
    assert calls == [] and m["zero_adv_frac"] == 1.0 and m["grad_norm"] == 0.0 and learner.version == 1
    learner.step(_samples(rollouts, [1, 0, 0] + [0.1] * 9))
    assert len(calls) == 1  # one pass, over the 3 live rows only
