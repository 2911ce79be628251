"""The learner on a tiny local model: ESS / LR scaling, foreign-tokenizer rows, baselines.

Rollouts are sampled once per module with ``Policy.generate``; each test loads a fresh copy of the
same weights, so on those rollouts the learner's first forward pass is on-policy (w ≈ 1).
"""

from __future__ import annotations

import math

import pytest
import torch

import swarm_node.policies.learner as learner_mod
from swarm_node.policies.learner import Learner, TrainSample
from swarm_node.policies.policy import Policy, SamplingParams, TokenBatch

PROMPTS = ["What is 2+3?", "Count the letter a in banana."]
G = 3  # completions per prompt


pytestmark = pytest.mark.usefixtures("one_torch_thread")  # tests/conftest.py


@pytest.fixture(scope="module")
def rollouts(tiny_model_dir):
    policy = Policy.load(tiny_model_dir)
    torch.manual_seed(0)
    return policy.generate(PROMPTS, G, SamplingParams(max_new_tokens=6))  # [prompt][g]


@pytest.fixture
def policy(tiny_model_dir):
    torch.manual_seed(0)
    return Policy.load(tiny_model_dir)


def _samples(rollouts, rewards, *, groups=None):
    """On-policy TrainSamples, in order prompt 0 g0..g2, prompt 1 g0..g2."""
    flat = [(i, c) for i, grp in enumerate(rollouts) for c in grp]
    out = []
    for k, ((i, c), r) in enumerate(zip(flat, rewards)):
        out.append(TrainSample(group=f"p{i}" if groups is None else groups[k], prompt_ids=c.prompt_ids,
                               completion_ids=c.completion_ids, behaviour_logprobs=c.logprobs,
                               behaviour_seq_logprob=c.seq_logprob, reward=float(r)))
    return out


def _capture(monkeypatch, name):
    """Wrap policies.learner.<name> and record every result (and kwargs)."""
    seen = []
    orig = getattr(learner_mod, name)

    def wrapper(*args, **kwargs):
        res = orig(*args, **kwargs)
        seen.append((args, kwargs, res))
        return res

    monkeypatch.setattr(learner_mod, name, wrapper)
    return seen


def _snapshot(policy):
    return [p.detach().clone() for p in policy.model.parameters()]


def test_on_policy_step_has_full_ess(policy, rollouts):
    base_lr = 1e-3
    learner = Learner(policy, warmup_steps=0, learning_rate=base_lr)
    m = learner.step(_samples(rollouts, [1, 0, 0, 0, 1, 1]))
    # π_θ = μ: every w = 1 → ESS = B = 6, ρ = 1, factor sqrt(1) = 1
    assert m["ess"] / m["batch_size"] == pytest.approx(1.0, abs=1e-3)
    assert m["rho"] == pytest.approx(1.0, abs=1e-3)
    assert m["lr_factor"] == pytest.approx(1.0, abs=1e-3)
    assert m["ratio_mean"] == pytest.approx(1.0, abs=1e-3)
    assert m["clip_frac"] == 0.0
    assert m["policy_version"] == 1.0 and learner.version == 1
    assert learner.optimizer.param_groups[0]["lr"] == pytest.approx(base_lr, rel=1e-3)
    # group means: p0 (1,0,0) → 1/3, p1 (0,1,1) → 2/3; |A| = 2/3,1/3,1/3,2/3,1/3,1/3 → mean 4/9
    assert m["adv_abs_mean"] == pytest.approx(4 / 9, abs=1e-6)
    assert m["zero_adv_frac"] == 0.0  # both groups have mixed rewards
    assert m["reward_mean"] == pytest.approx(0.5)


def test_shifted_behaviour_gives_hand_ess_and_applied_lr(policy, rollouts):
    base_lr = 1e-3
    samples = _samples(rollouts, [1, 0, 0, 0, 1, 1])
    # sample 0's μ(y) reported 4× smaller: log w_0 = log π − (log μ − log 4) = log 4 → w_0 = 4
    s0 = samples[0]
    samples[0] = TrainSample(**{**s0.__dict__, "behaviour_seq_logprob": s0.behaviour_seq_logprob - math.log(4)})
    before = _snapshot(policy)
    learner = Learner(policy, warmup_steps=0, learning_rate=base_lr, weight_decay=0.0)
    m = learner.step(samples)
    # w = [4, 1, 1, 1, 1, 1]: Σw = 9, Σw² = 16 + 5 = 21 → ESS = 81/21 = 3.857143, ρ = 3.857143/6
    # = 0.642857; sqrt rule factor = sqrt(0.642857) = 0.801784
    assert m["ess"] == pytest.approx(81 / 21, rel=1e-3)
    assert m["rho"] == pytest.approx(81 / 126, rel=1e-3)
    assert m["lr_factor"] == pytest.approx(0.801784, rel=1e-3)
    assert m["weight_mean"] == pytest.approx(9 / 6, rel=1e-3)  # (4 + 5·1)/6 = 1.5
    lr = learner.optimizer.param_groups[0]["lr"]
    assert lr == pytest.approx(base_lr * 0.801784, rel=1e-3)
    assert m["lr"] == pytest.approx(lr)
    # First AdamW step: Δp = -lr · g/(|g| + 1e-8) ≈ -lr · sign(g), so the largest parameter move
    # equals the learning rate actually applied (base_lr · factor, not base_lr)
    max_move = max(float((p.detach() - q).abs().max()) for p, q in zip(policy.model.parameters(), before))
    assert max_move == pytest.approx(base_lr * 0.801784, rel=1e-3)


def test_linear_rule_and_floor(policy, rollouts):
    samples = _samples(rollouts, [1, 0, 0, 0, 1, 1])
    s0 = samples[0]
    # μ(y_0) reported 1000× smaller → log w_0 = log 1000 → truncated at c = 8
    samples[0] = TrainSample(**{**s0.__dict__,
                                "behaviour_seq_logprob": s0.behaviour_seq_logprob - math.log(1000)})
    learner = Learner(policy, warmup_steps=0, learning_rate=1e-3, lr_rule="linear", lr_floor=0.5)
    m = learner.step(samples)
    # w = [8, 1, 1, 1, 1, 1]: Σw = 13, Σw² = 64 + 5 = 69 → ESS = 169/69 = 2.449275,
    # ρ = 169/414 = 0.408213 → linear factor 0.408213 < floor 0.5 → 0.5
    assert m["ess"] == pytest.approx(169 / 69, rel=1e-3)
    assert m["lr_factor"] == pytest.approx(0.5)
    assert learner.optimizer.param_groups[0]["lr"] == pytest.approx(5e-4)


def test_count_rule_scales_the_step_by_the_effective_rows_and_stops_at_the_cap(policy, rollouts):
    samples = _samples(rollouts, [1, 0, 0, 0, 1, 1])
    s0 = samples[0]
    samples[0] = TrainSample(**{**s0.__dict__,
                                "behaviour_seq_logprob": s0.behaviour_seq_logprob - math.log(1000)})
    # As in test_linear_rule_and_floor: w = [8, 1, 1, 1, 1, 1], ESS = 169/69 over 6 gradient rows.
    half = Learner(policy, warmup_steps=0, learning_rate=1e-3, lr_rule="count", ess_ref=169 / 69 / 2, lr_cap=4.0)
    m = half.step(samples)
    assert m["ess"] == pytest.approx(169 / 69, rel=1e-3)
    assert m["lr_factor"] == pytest.approx(math.sqrt(2), rel=1e-3)  # twice the reference's ESS
    assert half.optimizer.param_groups[0]["lr"] == pytest.approx(1e-3 * math.sqrt(2), rel=1e-3)
    capped = Learner(policy, warmup_steps=0, learning_rate=1e-3, lr_rule="count", ess_ref=0.01, lr_cap=2.0)
    assert capped.step(samples)["lr_factor"] == pytest.approx(2.0)  # sqrt(245) would be 15.6
    with pytest.raises(ValueError):
        Learner(policy, learning_rate=1e-3, lr_rule="count", ess_ref=0.0)  # no reference: refused at once


def test_foreign_tokenizer_samples_train(policy, rollouts):
    samples = _samples(rollouts, [1, 0, 0, 0, 1, 1])
    # rows 1 and 4 come from a "peer with another tokenizer": only the text and Σ log μ travel;
    # this node re-tokenizes the text and has no per-token behaviour log-probs
    for k in (1, 4):
        s = samples[k]
        text = rollouts[k // G][k % G].text
        samples[k] = TrainSample(group=s.group, prompt_ids=s.prompt_ids,
                                 completion_ids=policy.encode_completion(text),
                                 behaviour_logprobs=None, behaviour_seq_logprob=s.behaviour_seq_logprob,
                                 reward=s.reward, local=False)
    before = _snapshot(policy)
    learner = Learner(policy, learning_rate=1e-3)
    m = learner.step(samples)
    # 2 of 6 rows are sequence-level
    assert m["seq_level_frac"] == pytest.approx(2 / 6)
    assert all(math.isfinite(m[k]) for k in ("loss", "grad_norm", "ess", "lr_factor"))
    assert 0.0 < m["lr_factor"] <= 1.0
    assert learner.version == 1
    assert any(not torch.equal(p.detach(), q) for p, q in zip(policy.model.parameters(), before))


def test_median_baseline_masks_one_pivot_per_group(policy, rollouts, monkeypatch):
    adv_calls = _capture(monkeypatch, "group_advantages")
    loss_calls = _capture(monkeypatch, "policy_loss")
    learner = Learner(policy, learning_rate=1e-3, baseline="median")
    learner.step(_samples(rollouts, [0, 1, 1, 2, 0, 5]))
    (_, _, adv), = adv_calls
    # p0 rewards (0, 1, 1): median 1 → A = -1, 0, 0; p1 (2, 0, 5): median 2 → A = 0, -2, 3
    assert torch.allclose(adv.advantages, torch.tensor([-1.0, 0.0, 0.0, 0.0, -2.0, 3.0]))
    mask = adv.loss_mask
    assert int((~mask[:3]).sum()) == 1 and int((~mask[3:]).sum()) == 1
    assert bool(mask[0]) and not bool(mask[3])  # p1's pivot is the only reward-2 row
    # the pivot mask reaches the loss
    (args, _, _), = loss_calls
    assert torch.equal(args[0].sample_mask, mask)


def test_all_equal_rewards_give_zero_update(policy, rollouts, monkeypatch):
    # No row can carry gradient: the advantages come from the rewards alone (policies/inert_rows.py).
    adv_calls = _capture(monkeypatch, "rewards_only_advantages")
    before = _snapshot(policy)
    learner = Learner(policy, warmup_steps=0, learning_rate=1e-2, weight_decay=0.0)
    m = learner.step(_samples(rollouts, [1, 1, 1, 1, 1, 1]))
    (_, _, adv), = adv_calls
    # R − mean(R) = 0 for every row
    assert adv.advantages.abs().max().item() == 0.0
    assert m["loss"] == 0.0 and m["adv_abs_mean"] == 0.0 and m["zero_adv_frac"] == 1.0
    # every gradient is exactly 0 → grad_norm 0, and a fresh AdamW (m = v = 0) moves nothing
    assert m["grad_norm"] == 0.0
    assert all(p.grad is None or p.grad.abs().max().item() == 0.0 for p in policy.model.parameters())
    assert all(torch.equal(p.detach(), q) for p, q in zip(policy.model.parameters(), before))
    # the step still counts as an optimizer update
    assert learner.version == 1


def test_all_equal_rewards_with_weight_decay_only_decays(policy, rollouts):
    before = _snapshot(policy)
    lr, wd = 1e-2, 0.1
    learner = Learner(policy, warmup_steps=0, learning_rate=lr, weight_decay=wd)
    learner.step(_samples(rollouts, [0, 0, 0, 0, 0, 0]))
    # zero gradient: AdamW applies only the decoupled decay p ← p · (1 − lr·wd) = p · 0.999
    for p, q in zip(policy.model.parameters(), before):
        assert torch.allclose(p.detach(), q * 0.999, atol=1e-7)


def _hand_grad_sq_norm(policy, s: TrainSample) -> float:
    """‖∇_θ Σ_t log π(y_t)‖² for one sample, computed on its own one-row batch."""
    batch = TokenBatch.build([s.prompt_ids], [s.completion_ids], policy.tokenizer.pad_token_id)
    policy.model.zero_grad(set_to_none=True)
    policy.completion_logprobs(batch).sum().backward()
    total = sum(float((p.grad ** 2).sum()) for p in policy.model.parameters() if p.grad is not None)
    policy.model.zero_grad(set_to_none=True)
    return total


def test_opob_exact_uses_gradient_norms(tiny_model_dir, rollouts, monkeypatch):
    rewards = [1, 0, 0, 0, 1, 1]
    adv_calls = _capture(monkeypatch, "group_advantages")

    exact_policy = Policy.load(tiny_model_dir)
    samples = _samples(rollouts, rewards)
    exact_policy.model.train()
    g2 = [_hand_grad_sq_norm(exact_policy, s) for s in samples]
    Learner(exact_policy, learning_rate=1e-3, baseline="opob").step(samples)
    Learner(Policy.load(tiny_model_dir), learning_rate=1e-3, baseline="opob_approx").step(samples)
    (_, _, exact), (_, _, approx) = adv_calls

    # on-policy, w ≈ 1 → approx: W = w² ≈ 1 → b = group mean: p0 1/3, p1 2/3
    assert torch.allclose(approx.baselines, torch.tensor([1 / 3] * 3 + [2 / 3] * 3), atol=1e-4)
    # exact: W_i = g²_i · w²_i ≈ g²_i → b = Σ g² R / Σ g² per group
    for sl in (slice(0, 3), slice(3, 6)):
        num = sum(g * r for g, r in zip(g2[sl], rewards[sl]))
        den = sum(g2[sl])
        b = num / den
        assert exact.baselines[sl].tolist() == pytest.approx([b] * 3, rel=1e-3)
    # gradient norms differ between samples, so the baselines differ from the approximation
    assert len({round(g, 3) for g in g2}) > 1
    assert (exact.baselines - approx.baselines).abs().max().item() > 1e-4


def test_num_iterations_keeps_scaled_lr(policy, rollouts):
    samples = _samples(rollouts, [1, 0, 0, 0, 1, 1])
    s0 = samples[0]
    samples[0] = TrainSample(**{**s0.__dict__, "behaviour_seq_logprob": s0.behaviour_seq_logprob - math.log(4)})
    learner = Learner(policy, warmup_steps=0, learning_rate=1e-3, num_iterations=2)
    m = learner.step(samples)
    # two optimizer updates, both at base_lr · sqrt(81/126) (ESS from the first pass, as above)
    assert learner.version == 2 and m["policy_version"] == 2.0
    assert learner.optimizer.param_groups[0]["lr"] == pytest.approx(1e-3 * 0.801784, rel=1e-3)


def test_bad_batches_raise(policy, rollouts):
    learner = Learner(policy, learning_rate=1e-3)
    with pytest.raises(ValueError):
        learner.step([])
    s = _samples(rollouts, [1])[0]
    bad = TrainSample(**{**s.__dict__, "behaviour_logprobs": s.behaviour_logprobs[:-1]})
    with pytest.raises(ValueError):
        learner.step([bad])


def test_warmup_ramps_the_applied_lr_linearly(policy, rollouts):
    # warmup_steps = 4: updates 1..4 use 1/4, 2/4, 3/4, 4/4 of base_lr, then base_lr, times the
    # step's ESS factor (the same rollouts drift off-policy as the weights move).
    learner = Learner(policy, learning_rate=1e-3, warmup_steps=4)
    ramp = []
    for _ in range(5):
        m = learner.step(_samples(rollouts, [1, 0, 0, 1, 0, 1]))
        applied = learner.optimizer.param_groups[0]["lr"]
        assert m["lr"] == pytest.approx(applied)
        ramp.append(applied / (1e-3 * m["lr_factor"]))
    assert ramp == pytest.approx([0.25, 0.5, 0.75, 1.0, 1.0], rel=1e-6)


def test_non_finite_gradient_skips_the_update(policy, rollouts, caplog):
    learner = Learner(policy, learning_rate=1e-3)
    before = _snapshot(policy)
    first = next(p for p in policy.model.parameters() if p.requires_grad)
    first.register_hook(lambda g: g * float("inf"))  # a poisoned batch: one gradient blows up
    with caplog.at_level("WARNING"):
        m = learner.step(_samples(rollouts, [1, 0, 0, 1, 0, 1]))
    assert not math.isfinite(m["grad_norm"]) and "update skipped" in caplog.text
    after = _snapshot(policy)
    assert all(torch.equal(a, b) for a, b in zip(before, after))  # the weights were left unchanged


def test_naive_sharing_ignores_the_behaviour_policy(policy, rollouts):
    # The same shifted batch as above: with the correction off, every weight and ratio is 1.
    samples = _samples(rollouts, [1, 0, 0, 0, 1, 1])
    s0 = samples[0]
    lps = tuple(lp - 1.0 for lp in s0.behaviour_logprobs)  # μ far from π_θ, token by token too
    samples[0] = TrainSample(**{**s0.__dict__, "behaviour_logprobs": lps,
                                "behaviour_seq_logprob": s0.behaviour_seq_logprob - math.log(4)})
    m = Learner(policy, learning_rate=1e-3, off_policy_correction=False).step(samples)
    assert m["rho"] == pytest.approx(1.0) and m["lr_factor"] == pytest.approx(1.0)
    assert m["weight_mean"] == pytest.approx(1.0) and m["ratio_mean"] == pytest.approx(1.0, abs=1e-5)
    assert m["behaviour_rho"] < 0.9  # the ESS the batch really had is still recorded
    corrected = Learner(policy, learning_rate=1e-3).step(samples)
    assert corrected["rho"] < 0.9 and corrected["behaviour_rho"] == corrected["rho"]
