"""A policy's weights as broadcast bytes: the round trip, what a hostile source cannot apply, and
that generation never runs on half-applied weights."""

from __future__ import annotations

import threading

import pytest
import torch
from safetensors.torch import save as st_save

from swarm_node.policies.policy import Policy
from swarm_node.policies.weight_state import WeightStateError, apply_state, encode_state

pytestmark = pytest.mark.usefixtures("one_torch_thread")


@pytest.fixture()
def pair(tiny_model_dir):
    """Two policies of one model with different weights: a learner and its follower."""
    learner = Policy.load(tiny_model_dir, seed=0)
    with torch.no_grad():
        for p in learner.model.parameters():
            p.add_(0.01 * torch.randn_like(p))
    return learner, Policy.load(tiny_model_dir, seed=0)


def _same(a: Policy, b: Policy) -> bool:
    sa, sb = a.model.state_dict(), b.model.state_dict()
    return all(torch.equal(sa[k], sb[k]) for k in sa)


def test_a_version_round_trips_exactly(pair):
    learner, follower = pair
    data, fmt = encode_state(learner)
    assert fmt == "safetensors-full" and not _same(learner, follower)
    apply_state(follower, data, fmt)
    assert _same(learner, follower)


def test_weights_that_are_not_this_policys_are_refused_and_nothing_changes(pair):
    learner, follower = pair
    before = {k: v.clone() for k, v in follower.model.state_dict().items()}
    state = {k: v.clone() for k, v in learner.trained_state().items()}
    k0 = next(iter(state))
    bad = {
        "not safetensors": (b"\0" * 64, "safetensors-full"),
        "another format": (encode_state(learner)[0], "safetensors-lora"),
        "a missing tensor": (st_save({k: v for k, v in state.items() if k != k0}), "safetensors-full"),
        "a NaN": (st_save({**state, k0: torch.full_like(state[k0], float("nan"))}), "safetensors-full"),
        "another dtype": (st_save({**state, k0: state[k0].double()}), "safetensors-full"),
        "another shape": (st_save({**state, k0: state[k0].reshape(-1)[:-1].clone()}), "safetensors-full"),
    }
    for what, (data, fmt) in bad.items():
        with pytest.raises(WeightStateError):
            apply_state(follower, data, fmt)
        assert all(torch.equal(before[k], v) for k, v in follower.model.state_dict().items()), what


def test_generation_never_runs_on_half_applied_weights(pair, monkeypatch):
    """Generation holds the weights lock for the whole call: an apply that arrives meanwhile
    waits, and the call sees one version from its first token to its last."""
    learner, follower = pair
    data, fmt = encode_state(learner)
    inside, release = threading.Event(), threading.Event()
    seen = []
    real_sample = Policy._sample

    def slow_sample(self, rows, params):
        seen.append(next(self.model.parameters()).detach().clone())
        inside.set()
        release.wait(30)  # an apply is attempted while we are mid-generation
        out = real_sample(self, rows, params)
        seen.append(next(self.model.parameters()).detach().clone())
        return out

    monkeypatch.setattr(Policy, "_sample", slow_sample)
    gen = threading.Thread(target=follower.generate, args=(["1+1="], 2))
    gen.start()
    assert inside.wait(30)
    applier = threading.Thread(target=apply_state, args=(follower, data, fmt))
    applier.start()
    applier.join(0.5)
    assert applier.is_alive() and not _same(learner, follower)  # waiting on the lock, nothing applied
    release.set()
    gen.join(30)
    applier.join(30)
    assert not applier.is_alive() and _same(learner, follower)  # applied, once generation ended
    assert torch.equal(seen[0], seen[-1])  # the whole call sampled from one version


def test_a_lora_learner_broadcasts_its_adapter_only_and_a_lora_follower_applies_it_exactly(tiny_model_dir):
    """With LoRA what travels is the adapter (megabytes, not the model): only ``lora_`` tensors,
    format ``safetensors-lora``, and a follower on the same base applies it exactly; a full-weights
    follower refuses it, and the frozen base stays untouched."""
    learner = Policy.load(tiny_model_dir, seed=0, lora_rank=4)
    follower = Policy.load(tiny_model_dir, seed=1, lora_rank=4)
    with torch.no_grad():
        for name, p in learner.model.named_parameters():
            if "lora_" in name:
                p.add_(0.05 * torch.randn_like(p))
    data, fmt = encode_state(learner)
    assert fmt == "safetensors-lora"
    from safetensors.torch import load as st_load

    sent = st_load(data)
    assert sent and all("lora_" in k for k in sent)
    full = sum(v.numel() for v in learner.model.state_dict().values())
    assert sum(v.numel() for v in sent.values()) < full / 4  # the adapter, not the model
    base_before = {k: v.clone() for k, v in follower.model.state_dict().items() if "lora_" not in k}
    apply_state(follower, data, fmt)
    got = follower.trained_state()
    assert set(got) == set(sent) and all(torch.equal(got[k].cpu(), sent[k]) for k in sent)
    assert all(torch.equal(base_before[k], v) for k, v in follower.model.state_dict().items() if "lora_" not in k)
    with pytest.raises(WeightStateError, match="cannot be applied"):
        apply_state(Policy.load(tiny_model_dir, seed=0), data, fmt)
