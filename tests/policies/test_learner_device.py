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

from policies.learner import Learner, TrainSample
from policies.loss import LossConfig
from policies.policy import Policy, SamplingParams

DEVICES = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])

OPTIONS = {
    "mean": dict(baseline="mean"),
    "median": dict(baseline="median"),
    "opob": dict(baseline="opob"),
    "opob_approx": dict(baseline="opob_approx"),
    "m2po": dict(loss=LossConfig(m2po_tau=0.0)),  # τ = 0: the mask drops tokens whatever the ratios
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
                                   source="sn1peer" if peer else None))
    return out


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("option", list(OPTIONS))
def test_every_learner_option_runs_on_the_given_device(tiny_model_dir, samples, device, option):
    torch.manual_seed(0)
    policy = Policy.load(tiny_model_dir, device=device)
    learner = Learner(policy, learning_rate=1e-3, **OPTIONS[option])
    before = [p.detach().clone() for p in policy.model.parameters()]
    with torch.device("meta"):  # anything made without a device is caught
        metrics = learner.step(samples)
    assert all(math.isfinite(v) for v in metrics.values() if isinstance(v, float))
    assert all(p.device.type == device for p in policy.model.parameters())
    assert any(not torch.equal(a, b) for a, b in zip(before, policy.model.parameters()))  # it updated
    if option == "m2po":
        assert metrics["m2po_masked_frac"] > 0
