"""The merged sampler (policies/merged_sampler.py) samples from what the learner trains: its logits
equal the LoRA policy's to float32 rounding, it folds the adapter in again after an optimizer step
or a restored state (and only then), and it shares the frozen tensors instead of copying them."""

from __future__ import annotations

import pytest
import torch

from swarm_node.policies.policy import Policy

pytestmark = pytest.mark.usefixtures("one_torch_thread")

IDS = torch.tensor([[3, 17, 42, 9, 100, 7]])


def _logits(model):
    with torch.no_grad():
        return model(IDS).logits


@pytest.fixture
def policy(tiny_model_dir):
    p = Policy.load(tiny_model_dir, lora_rank=4, seed=0)
    with torch.no_grad():
        for n, t in p.model.named_parameters():
            if "lora_B" in n:
                t.normal_(0, 0.05)  # a trained-looking adapter (B starts at 0)
    p.merge_for_sampling()
    return p


def test_it_matches_the_adapter_and_folds_again_only_when_the_adapter_changed(policy):
    sampler = policy.merged
    torch.testing.assert_close(_logits(policy.sampling_model()), _logits(policy.model), atol=1e-5, rtol=1e-5)
    assert sampler.merges == 1
    policy.sampling_model()
    assert sampler.merges == 1  # nothing changed: no second fold
    before = _logits(policy.sampling_model())
    opt = torch.optim.SGD([t for t in policy.model.parameters() if t.requires_grad], lr=0.5)
    (policy.model(IDS).logits ** 2).mean().backward()
    opt.step()  # what the learner's AdamW step does: in place
    after = _logits(policy.sampling_model())
    assert sampler.merges == 2 and not torch.allclose(before, after)
    torch.testing.assert_close(after, _logits(policy.model), atol=1e-5, rtol=1e-5)
    state = {k: torch.zeros_like(v) if "lora_B" in k else v.clone() for k, v in policy.trained_state().items()}
    policy.load_trained_state(state)  # a resume, a broadcast version
    torch.testing.assert_close(_logits(policy.sampling_model()), _logits(policy.model), atol=1e-5, rtol=1e-5)
    assert sampler.merges == 3


def test_it_copies_only_the_adapted_weights(policy):
    base = policy.model.get_base_model()
    merged = policy.merged.model
    assert merged.get_input_embeddings().weight.data_ptr() == base.get_input_embeddings().weight.data_ptr()
    adapted = {n for n, m in base.named_modules() if hasattr(m, "lora_A")}
    assert adapted and all(merged.get_submodule(n).weight.data_ptr() != base.get_submodule(n).base_layer.weight.data_ptr()
                           for n in adapted)
    assert not any(p.requires_grad for p in merged.parameters())
