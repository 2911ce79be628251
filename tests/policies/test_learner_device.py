"""Every learner option on a device the test names: the same code a CUDA node runs.

On a machine with CUDA the ``cuda`` cases run the learner there. Everywhere, every case runs with
the *default* device set to ``meta`` (``torch.device("meta")`` as a context): a tensor the
learner makes without naming its device lands on ``meta``, and mixing it with the batch's real
tensors fails at once. That is how a CPU-only CI catches what a CUDA node would hit (M2PO's mask
and exact OPOB's gradient norms were built on the CPU while everything else was on the GPU).
"""

from __future__ import annotations

import math

import pytest
import torch

from swarm_node.policies.learner import Learner, TrainSample
from swarm_node.policies.loss import LossConfig
from swarm_node.policies.policy import Policy, SamplingParams

DEVICES = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])

OPTIONS = {
    "mean": dict(baseline="mean"),
    "median": dict(baseline="median"),
    "opob": dict(baseline="opob"),
    "opob_approx": dict(baseline="opob_approx"),
    # A peer's shifted log μ gives (log r)² ≈ 0.09, this node's rows ~0: τ = 1e-3 drops the peer's
    # tokens and keeps ours, with no knife-edge (at τ = 0 a 1e-7 rounding difference flips a token).
    "m2po": dict(loss=LossConfig(m2po_tau=1e-3)),
    "sequence_level": dict(loss=LossConfig(importance_sampling_level="sequence")),
    "dr_grpo_group_scale": dict(loss=LossConfig(loss_type="dr_grpo"), scale_rewards="group"),
    "grpo_batch_scale_2_iterations": dict(loss=LossConfig(loss_type="grpo"), scale_rewards="batch",
                                          num_iterations=2),
    "naive_sharing": dict(off_policy_correction=False),
}


pytestmark = pytest.mark.usefixtures("one_torch_thread")  # tests/conftest.py


@pytest.fixture(scope="module")
def samples(tiny_model_dir) -> list[TrainSample]:
    """Local rows, a peer's rows with shifted log μ, and a foreign-tokenizer row: every path."""
    policy = Policy.load(tiny_model_dir)
    torch.manual_seed(0)
    groups = policy.generate(["What is 2+3?", "Count the letter a in banana."], 3, SamplingParams(max_new_tokens=6))
    out = []
    for i, grp in enumerate(groups):
        for g, c in enumerate(grp):
            peer = i == 1
            lps = tuple(v - 0.3 for v in c.logprobs) if peer else c.logprobs
            out.append(TrainSample(group=f"p{i}", prompt_ids=c.prompt_ids, completion_ids=c.completion_ids,
                                   behaviour_logprobs=None if (peer and g == 0) else lps,
                                   behaviour_seq_logprob=sum(lps), reward=float(g % 2), local=not peer,
                                   source="sn1peer" if peer else None, verified=peer and g % 2 == 1))
    return out


@pytest.mark.parametrize("micro_batch", [0, 2])
@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("option", list(OPTIONS))
def test_every_learner_option_runs_on_the_given_device(tiny_model_dir, samples, device, option, micro_batch):
    torch.manual_seed(0)
    policy = Policy.load(tiny_model_dir, device=device)
    learner = Learner(policy, learning_rate=1e-3, micro_batch_size=micro_batch, **OPTIONS[option])
    before = [p.detach().clone() for p in policy.model.parameters()]
    with torch.device("meta"):  # anything made without a device is caught
        metrics = learner.step(samples)
    assert all(math.isfinite(v) for v in metrics.values() if isinstance(v, float))
    assert all(p.device.type == device for p in policy.model.parameters())
    assert any(not torch.equal(a, b) for a, b in zip(before, policy.model.parameters()))  # it updated
    if option == "m2po":
        assert metrics["m2po_masked_frac"] > 0


def _stepped(tiny_model_dir, samples, steps=2, **kw):
    torch.manual_seed(0)
    policy = Policy.load(tiny_model_dir)
    learner = Learner(policy, learning_rate=1e-3, **kw)
    metrics = [learner.step(samples) for _ in range(steps)]
    return policy, learner, metrics


@pytest.mark.parametrize("option", list(OPTIONS))
def test_micro_batches_give_the_whole_batch_update(tiny_model_dir, samples, option):
    """Gradients accumulated over slices of 1, 2 and 4 rows (the batch is 6) are the batch's: the
    normaliser, M2PO's mask, OPOB's norms and the ESS come from the whole batch, not the slice."""
    whole, _, m_whole = _stepped(tiny_model_dir, samples, steps=1, **OPTIONS[option])
    for rows in (1, 2, 4):
        sliced, learner, m_sliced = _stepped(tiny_model_dir, samples, steps=1, micro_batch_size=rows,
                                             **OPTIONS[option])
        _assert_same_update(whole, sliced)
        for k, v in m_whole[0].items():
            if v is None:  # a metric of rows the batch has none of (ext_pos_*): none either way
                assert m_sliced[0][k] is None, k
            elif k not in ("micro_batch", "passes"):
                assert m_sliced[0][k] == pytest.approx(v, rel=1e-4, abs=1e-6), k
        assert m_sliced[0]["micro_batch"] == rows and m_whole[0]["micro_batch"] == len(samples)
        assert m_sliced[0]["passes"] == -(-len(samples) // rows) and m_whole[0]["passes"] == 1


@pytest.mark.parametrize("option", ["mean", "m2po", "opob"])
def test_passes_sized_by_tokens_give_the_whole_batch_update(tiny_model_dir, samples, option):
    """Passes cut by a token budget (rows longest first, each at its own width) give the
    batch's update too: a budget of one longest row a pass, and one of about half the batch."""
    whole, _, _ = _stepped(tiny_model_dir, samples, steps=1, **OPTIONS[option])
    longest = max(len(s.prompt_ids) for s in samples) + max(len(s.completion_ids) for s in samples)
    for budget, most in ((longest, len(samples)), (3 * longest, 3)):
        sliced, _, m = _stepped(tiny_model_dir, samples, steps=1, micro_batch_tokens=budget, **OPTIONS[option])
        _assert_same_update(whole, sliced)
        assert 2 <= m[0]["passes"] <= most


def _assert_same_update(a: Policy, b: Policy) -> None:
    """The last update's gradients agree to float32 summation order (to 1e-4 of the largest), and
    so do the weights (Adam divides by √v: a weight whose gradient is ~0 may move by a part of
    lr = 1e-3; 2e-5 is 2% of it)."""
    for (name, pa), pb in zip(a.model.named_parameters(), b.model.parameters()):
        scale = float(pa.grad.abs().max()) if pa.grad is not None else 0.0
        if pa.grad is not None:
            torch.testing.assert_close(pa.grad, pb.grad, rtol=1e-4, atol=1e-4 * scale + 1e-12, msg=lambda m: f"{name}: {m}")
        torch.testing.assert_close(pa, pb, rtol=0, atol=2e-5, msg=lambda m: f"{name}: {m}")


def _oom_above(policy, monkeypatch, rows: int, calls: list | None = None):
    """Every forward pass over more than ``rows`` rows raises CUDA's out-of-memory error."""
    real = policy.completion_logprobs

    def forward(batch, temperature=1.0):
        if calls is not None:
            calls.append(len(batch))
        if len(batch) > rows:
            raise torch.OutOfMemoryError(f"CUDA out of memory. Tried to allocate {len(batch)} GiB (injected)")
        return real(batch, temperature)

    monkeypatch.setattr(policy, "completion_logprobs", forward)


def test_out_of_memory_with_a_token_budget_halves_from_the_passes_rows_not_the_batchs(tiny_model_dir, samples,
                                                                                        monkeypatch):
    """Passes of 3 rows by the budget: a failure halves 3 to 1, once (not 6 -> 3 -> 1, the first
    halving changing nothing), and the record's micro_batch says the rows a pass took."""
    clean, _, _ = _stepped(tiny_model_dir, samples, steps=1)
    longest = max(len(s.prompt_ids) for s in samples) + max(len(s.completion_ids) for s in samples)
    torch.manual_seed(0)
    policy = Policy.load(tiny_model_dir)
    calls: list[int] = []
    _oom_above(policy, monkeypatch, 2, calls)
    learner = Learner(policy, learning_rate=1e-3, micro_batch_tokens=3 * longest)
    m = learner.step(samples)
    assert m["oom_halvings"] == 1.0 and learner.micro_batch_size == 1 and m["micro_batch"] == 1.0
    assert max(calls) == 3
    _assert_same_update(clean, policy)


@pytest.mark.parametrize("option", ["mean", "opob", "grpo_batch_scale_2_iterations"])
def test_out_of_memory_halves_the_micro_batch_and_the_update_is_unchanged(tiny_model_dir, samples, option,
                                                                             monkeypatch):
    clean, _, m_clean = _stepped(tiny_model_dir, samples, **OPTIONS[option])
    torch.manual_seed(0)
    policy = Policy.load(tiny_model_dir)
    _oom_above(policy, monkeypatch, 2)
    learner = Learner(policy, learning_rate=1e-3, **OPTIONS[option])
    m = [learner.step(samples) for _ in range(2)]
    # 6 rows fail, then 3; 1 row a pass fits, and is kept for the next step (no new failure).
    assert [x["oom_halvings"] for x in m] == [2.0, 0.0]
    assert learner.micro_batch_size == 1 and m[0]["micro_batch"] == 1
    _assert_same_update(clean, policy)
    assert m[1]["loss"] == pytest.approx(m_clean[1]["loss"], rel=1e-4, abs=1e-6)
    assert learner.version == clean_version(OPTIONS[option])


def clean_version(option: dict) -> int:
    return 2 * option.get("num_iterations", 1)


def test_out_of_memory_at_one_row_is_a_clear_error_that_changes_nothing(tiny_model_dir, samples, monkeypatch):
    from swarm_node.policies.oom import OutOfMemory

    torch.manual_seed(0)
    policy = Policy.load(tiny_model_dir)
    learner = Learner(policy, learning_rate=1e-3)
    learner.step(samples)  # the optimizer has state to lose
    before = [p.detach().clone() for p in policy.model.parameters()]
    state = {k: v["exp_avg"].clone() for k, v in learner.optimizer.state.items()}
    _oom_above(policy, monkeypatch, 0)
    with pytest.raises(OutOfMemory, match="does not fit in memory even one row at a time.*model.lora_rank"):
        learner.step(samples)
    assert all(torch.equal(a, b) for a, b in zip(before, policy.model.parameters()))
    assert all(torch.equal(state[k], v["exp_avg"]) for k, v in learner.optimizer.state.items())
    assert learner.version == 1


def test_an_error_that_is_not_out_of_memory_is_not_retried(tiny_model_dir, samples, monkeypatch):
    torch.manual_seed(0)
    policy = Policy.load(tiny_model_dir)
    calls = []

    def broken(batch, temperature=1.0):
        calls.append(len(batch))
        raise RuntimeError("CUDA error: device-side assert triggered")

    monkeypatch.setattr(policy, "completion_logprobs", broken)
    with pytest.raises(RuntimeError, match="device-side assert"):
        Learner(policy, learning_rate=1e-3).step(samples)
    assert calls == [len(samples)]


def test_out_of_memory_in_the_optimizer_is_a_clear_error(tiny_model_dir, samples, monkeypatch):
    from swarm_node.policies.oom import OutOfMemory

    torch.manual_seed(0)
    learner = Learner(Policy.load(tiny_model_dir), learning_rate=1e-3)

    def step():
        raise torch.OutOfMemoryError("CUDA out of memory (injected into AdamW's first step)")

    monkeypatch.setattr(learner.optimizer, "step", step)
    with pytest.raises(OutOfMemory, match="optimizer's state does not fit.*model.lora_rank"):
        learner.step(samples)
