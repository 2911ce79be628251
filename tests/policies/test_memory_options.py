"""The learner's memory options on a tiny local model: gradient checkpointing (the same update,
layers recomputed in the backward pass), and bf16 weights with LoRA and checkpointing together,
as a consumer-GPU profile runs them."""

from __future__ import annotations

import math

import pytest
import torch

from swarm_node.policies.learner import Learner, TrainSample
from swarm_node.policies.policy import Policy, SamplingParams

pytestmark = pytest.mark.usefixtures("one_torch_thread")  # tests/conftest.py


@pytest.fixture(scope="module")
def samples(tiny_model_dir) -> list[TrainSample]:
    policy = Policy.load(tiny_model_dir)
    torch.manual_seed(0)
    groups = policy.generate(["What is 2+3?", "Count the letter a in banana."], 3, SamplingParams(max_new_tokens=6))
    return [TrainSample(group=f"p{i}", prompt_ids=c.prompt_ids, completion_ids=c.completion_ids,
                        behaviour_logprobs=c.logprobs, behaviour_seq_logprob=c.seq_logprob, reward=float(g % 2))
            for i, grp in enumerate(groups) for g, c in enumerate(grp)]


def _attention_calls(policy: Policy) -> list[int]:
    """Counts the first layer's attention forward passes (a hook inside the checkpointed region
    runs again when the backward pass recomputes the layer)."""
    calls = [0]
    layer = next(m for m in policy.model.modules() if type(m).__name__.endswith("DecoderLayer"))
    layer.self_attn.register_forward_hook(lambda *_: calls.__setitem__(0, calls[0] + 1))
    return calls


@pytest.mark.parametrize("lora_rank", [0, 4])
def test_gradient_checkpointing_gives_the_same_update_and_recomputes(tiny_model_dir, samples, lora_rank):
    out = {}
    for ckpt in (False, True):
        torch.manual_seed(0)
        policy = Policy.load(tiny_model_dir, lora_rank=lora_rank, seed=0, gradient_checkpointing=ckpt)
        calls = _attention_calls(policy)
        m = Learner(policy, learning_rate=1e-3).step(samples)
        grads = {n: p.grad.clone() for n, p in policy.model.named_parameters() if p.grad is not None}
        out[ckpt] = (m, grads, calls[0])
    (m0, g0, c0), (m1, g1, c1) = out[False], out[True]
    assert c0 == 1 and c1 == 2  # one forward; with checkpointing, once more in the backward
    assert g0.keys() == g1.keys() and g0
    for k in g0:
        torch.testing.assert_close(g0[k], g1[k], rtol=1e-5, atol=1e-7)
    assert m1["loss"] == pytest.approx(m0["loss"], rel=1e-6)


def test_bf16_lora_with_checkpointing_and_micro_batches_trains(tiny_model_dir, samples):
    torch.manual_seed(0)
    policy = Policy.load(tiny_model_dir, dtype="bfloat16", lora_rank=4, seed=0, gradient_checkpointing=True)
    assert all(p.dtype == torch.bfloat16 for n, p in policy.model.named_parameters() if "lora_" not in n)
    before = {n: p.detach().clone() for n, p in policy.model.named_parameters() if p.requires_grad}
    learner = Learner(policy, learning_rate=1e-2, micro_batch_size=2)
    metrics = [learner.step(samples) for _ in range(2)]
    assert all(math.isfinite(v) for m in metrics for v in m.values() if isinstance(v, float))
    assert metrics[0]["rho"] == pytest.approx(1.0, abs=0.05)  # bf16 log-probs are close to μ's
    assert any(not torch.equal(p, before[n]) for n, p in policy.model.named_parameters() if p.requires_grad)


def test_gradient_checkpointing_leaves_generation_and_dropout_in_eval_mode(tiny_model_dir):
    policy = Policy.load(tiny_model_dir, gradient_checkpointing=True)
    policy.learning_mode()
    layers = [m for m in policy.model.modules() if type(m).__name__.endswith("DecoderLayer")]
    assert layers and all(m.training for m in layers)
    assert not any(m.training for m in policy.model.modules() if isinstance(m, torch.nn.Dropout))
    assert not policy.model.training
    torch.manual_seed(0)
    policy.generate(["What is 2+3?"], 2, SamplingParams(max_new_tokens=4))
    assert not any(m.training for m in policy.model.modules())  # generate put every module in eval


def test_dropout_is_off_so_checkpointed_learner_passes_match_generation(tiny_model_dir, tmp_path):
    """OPT's layers drop out by their own training flag, which gradient checkpointing sets: a
    checkpoint with dropout 0.3 must still give the learner the log-probs generation records."""
    from transformers import AutoTokenizer, OPTConfig, OPTForCausalLM

    from swarm_node.policies.policy import TokenBatch

    tok = AutoTokenizer.from_pretrained(tiny_model_dir)
    cfg = OPTConfig(vocab_size=len(tok), hidden_size=32, num_hidden_layers=2, ffn_dim=64, num_attention_heads=2,
                    word_embed_proj_dim=32, dropout=0.3, attention_dropout=0.1, max_position_embeddings=128,
                    pad_token_id=tok.pad_token_id, eos_token_id=tok.eos_token_id, bos_token_id=tok.eos_token_id)
    torch.manual_seed(0)
    OPTForCausalLM(cfg).save_pretrained(tmp_path)
    tok.save_pretrained(tmp_path)
    policy = Policy.load(tmp_path, gradient_checkpointing=True)
    assert policy.model.config.dropout == 0.0 and policy.model.config.attention_dropout == 0.0
    batch = TokenBatch.build([(5, 6, 7, 8)], [(20, 21, 22, 23)], int(tok.pad_token_id))
    policy.model.eval()
    with torch.no_grad():
        recorded = policy.completion_logprobs(batch)
    policy.learning_mode()
    assert any(m.training for m in policy.model.modules())  # the checkpointed layers
    for _ in range(2):
        torch.testing.assert_close(policy.completion_logprobs(batch).detach(), recorded, rtol=0, atol=1e-6)
