"""Tests of policies.policy: loading real checkpoints from disk, TokenBatch layout and the learner's
log-probs, fingerprints, LoRA and save/load round trips. Generation and the behaviour log-probs it
records: test_policy_generation.py (it imports ``PROMPTS`` from here).

Every model here is the tiny locally-built Qwen2 of ``tests/conftest.py`` (no download).
"""

from __future__ import annotations

import copy
import warnings
from dataclasses import replace

import pytest
import torch

from swarm_node.policies.errors import PolicyError
from swarm_node.policies.learner import Learner, TrainSample
from swarm_node.policies.policy import Policy, SamplingParams, TokenBatch, tokenizer_fingerprint

pytestmark = pytest.mark.usefixtures("one_torch_thread")  # tests/conftest.py


# Three prompts whose token lengths all differ, so generation and recompute both left-pad.
PROMPTS = ["What is 2+3?", "Sort the list [3, 1, 2] in ascending order and answer.", "x"]


def _samples(policy: Policy, prompts=PROMPTS[:2], G: int = 4, seed: int = 0) -> list[TrainSample]:
    torch.manual_seed(seed)
    groups = policy.generate(prompts, G, SamplingParams(max_new_tokens=8))
    return [TrainSample(group=str(i), prompt_ids=c.prompt_ids, completion_ids=c.completion_ids,
                        behaviour_logprobs=c.logprobs, behaviour_seq_logprob=c.seq_logprob,
                        reward=float(g % 2))  # rewards vary inside each group: advantages ≠ 0
            for i, grp in enumerate(groups) for g, c in enumerate(grp)]


def _logits(policy: Policy) -> torch.Tensor:
    ids = torch.tensor([[5, 6, 7, 8, 9, 10], [11, 12, 13, 14, 15, 16]])
    with torch.no_grad():
        return policy.model(input_ids=ids).logits.float()


# ----------------------------------------------------------------------------------- loading


def test_load_local_checkpoint_from_disk(tiny_model_dir):
    for name in (tiny_model_dir, str(tiny_model_dir)):
        policy = Policy.load(name)
        assert policy.name == str(tiny_model_dir)
        assert type(policy.model).__name__ == "Qwen2ForCausalLM"
        assert policy.device == torch.device("cpu")
        assert next(policy.model.parameters()).dtype == torch.float32
        assert all(p.requires_grad for p in policy.model.parameters())  # full fine-tuning
        tok = policy.tokenizer
        assert tok.padding_side == "left"
        assert tok.pad_token_id is not None and tok.pad_token_id != policy.eos_token_id
        assert policy.eos_token_id == tok.convert_tokens_to_ids("<eos>")


def test_load_bfloat16(tiny_model_dir):
    policy = Policy.load(tiny_model_dir, dtype="bfloat16")
    assert next(policy.model.parameters()).dtype == torch.bfloat16


def test_load_missing_path_raises_policy_error(tmp_path, monkeypatch):
    missing = tmp_path / "no" / "such-model"
    with pytest.raises(PolicyError, match="no such directory") as exc:
        Policy.load(missing)
    assert str(missing) in str(exc.value)
    with pytest.raises(PolicyError, match="no such directory"):
        Policy.load(str(missing))
    monkeypatch.chdir(tmp_path)
    with pytest.raises(PolicyError, match="no such directory"):
        Policy.load("runs/a/checkpoint-3")  # relative path, not a hub id
    with pytest.raises(PolicyError, match="no such directory"):
        Policy.load("./model")


def test_load_directory_without_model_raises_policy_error(tmp_path):
    with pytest.raises(PolicyError, match="cannot load model"):
        Policy.load(tmp_path)  # exists, but holds no tokenizer or weights


def test_load_unknown_dtype(tiny_model_dir):
    with pytest.raises(PolicyError, match="unknown dtype"):
        Policy.load(tiny_model_dir, dtype="float8")


# --------------------------------------------------------------------------------- TokenBatch


def test_token_batch_layout():
    b = TokenBatch.build([(5, 6, 7), (8,), (2, 3)], [(9, 10), (11, 12, 13, 1), ()], pad_id=0)
    assert b.prompt_len == 3
    assert b.input_ids.tolist() == [[5, 6, 7, 9, 10, 0, 0],
                                    [0, 0, 8, 11, 12, 13, 1],
                                    [0, 2, 3, 0, 0, 0, 0]]
    assert b.attention_mask.tolist() == [[1, 1, 1, 1, 1, 0, 0],
                                         [0, 0, 1, 1, 1, 1, 1],
                                         [0, 1, 1, 0, 0, 0, 0]]
    assert b.completion_mask.tolist() == [[1, 1, 0, 0], [1, 1, 1, 1], [0, 0, 0, 0]]
    assert b.completion_mask.dtype == torch.float32
    assert b.input_ids.dtype == torch.long and b.attention_mask.dtype == torch.long
    # every completion starts at column P
    assert all(int(b.input_ids[i, 3]) == c[0] for i, c in enumerate([(9,), (11,)]))


def test_token_batch_empty_completions_and_errors():
    b = TokenBatch.build([(4, 5)], [()], pad_id=7)
    assert b.input_ids.tolist() == [[4, 5, 7]]  # T is at least 1
    assert b.completion_mask.tolist() == [[0.0]]
    with pytest.raises(ValueError):
        TokenBatch.build([(1,)], [(2,), (3,)], pad_id=0)
    with pytest.raises(ValueError):
        TokenBatch.build([], [], pad_id=0)


def test_completion_logprobs_independent_of_batch_neighbours(tiny_model_dir):
    """A row's log-probs do not change when longer rows force more padding around it."""
    policy = Policy.load(tiny_model_dir)
    pad = policy.tokenizer.pad_token_id
    row = ((20, 21, 22), (30, 31, 32))
    alone = TokenBatch.build([row[0]], [row[1]], pad)
    crowded = TokenBatch.build([row[0], tuple(range(40, 60))], [row[1], tuple(range(60, 70))], pad)
    with torch.no_grad():
        a = policy.completion_logprobs(alone)[0]
        c = policy.completion_logprobs(crowded)[0, :3]
    assert float((a - c).abs().max()) < 1e-5


def test_completion_logprobs_has_grad_when_training(tiny_model_dir):
    policy = Policy.load(tiny_model_dir)
    b = TokenBatch.build([(5, 6)], [(7, 8)], policy.tokenizer.pad_token_id)
    logp = policy.completion_logprobs(b)
    assert logp.requires_grad
    logp.sum().backward()
    assert any(p.grad is not None and p.grad.abs().sum() > 0 for p in policy.model.parameters())


# ------------------------------------------------------------------------------ fingerprints


def test_fingerprints_stable_across_loads(tiny_model_dir):
    a, b = Policy.load(tiny_model_dir), Policy.load(str(tiny_model_dir))
    assert a.tokenizer_fingerprint == b.tokenizer_fingerprint
    assert a.model_fingerprint == b.model_fingerprint
    assert len(a.tokenizer_fingerprint) == 16 and len(a.model_fingerprint) == 16
    assert tokenizer_fingerprint(a.tokenizer) == a.tokenizer_fingerprint


def test_fingerprints_differ(tiny_model_dir):
    from transformers import Qwen2ForCausalLM

    from swarm_node.policies.default_model import DefaultModelRecipe, _train_tokenizer

    base = Policy.load(tiny_model_dir)
    # a genuinely different tokenizer (another BPE vocabulary size) ...
    other_tok = _train_tokenizer(replace(DefaultModelRecipe(), vocab_size=300))
    assert tokenizer_fingerprint(other_tok) != base.tokenizer_fingerprint
    # ... and the same tokenizer with one added token
    grown = copy.deepcopy(base.tokenizer)
    grown.add_tokens(["<extra_token>"])
    assert tokenizer_fingerprint(grown) != base.tokenizer_fingerprint
    # another architecture, same tokenizer: only the model fingerprint moves
    cfg = copy.deepcopy(base.model.config)
    cfg.hidden_size = 48
    other = Policy(Qwen2ForCausalLM(cfg), copy.deepcopy(base.tokenizer), "other")
    assert other.tokenizer_fingerprint == base.tokenizer_fingerprint
    assert other.model_fingerprint != base.model_fingerprint


# -------------------------------------------------------------------------------------- LoRA


def test_lora_trains_only_adapters(tiny_model_dir):
    policy = Policy.load(tiny_model_dir, lora_rank=4, seed=0)
    named = dict(policy.model.named_parameters())
    trainable = {n for n, p in named.items() if p.requires_grad}
    assert trainable and all("lora_" in n for n in trainable)
    assert any("lora_" not in n for n in named)  # the frozen base is still there
    learner = Learner(policy, learning_rate=1e-2)
    assert {id(p) for p in learner.params} == {id(named[n]) for n in trainable}
    before = {n: p.detach().clone() for n, p in named.items()}
    metrics = learner.step(_samples(policy))
    assert metrics["grad_norm"] > 0
    changed = {n for n, p in policy.model.named_parameters() if not torch.equal(p, before[n])}
    assert changed and changed <= trainable


def test_a_lora_start_prints_no_deprecation_warning(tiny_model_dir):
    """peft reads transformers' deprecated ``is_gradient_checkpointing`` when it wraps a model: that
    one warning is filtered (Policy.load says why); any other still shows."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")  # every warning, however often this process saw it before
        Policy.load(tiny_model_dir, lora_rank=4, seed=0, gradient_checkpointing=True)
        warnings.warn("`is_gradient_checkpointing` is deprecated (said by this test)", FutureWarning)
    deprecations = [str(w.message) for w in caught if issubclass(w.category, (FutureWarning, DeprecationWarning))]
    # only this test's own: the filter names transformers' module, so the same words from elsewhere show
    assert deprecations == ["`is_gradient_checkpointing` is deprecated (said by this test)"], deprecations


def test_lora_seed_makes_adapter_init_reproducible(tiny_model_dir):
    a = Policy.load(tiny_model_dir, lora_rank=4, seed=5)
    b = Policy.load(tiny_model_dir, lora_rank=4, seed=5)
    for (na, pa), (nb, pb) in zip(a.model.named_parameters(), b.model.named_parameters()):
        assert na == nb and torch.equal(pa, pb)


# ------------------------------------------------------------------------------- save / load


def test_save_load_round_trip(tiny_model_dir, tmp_path):
    policy = Policy.load(tiny_model_dir)
    Learner(policy, learning_rate=1e-2).step(_samples(policy))  # weights differ from the file now
    policy.save(tmp_path / "ckpt")
    back = Policy.load(tmp_path / "ckpt")
    assert float((_logits(back) - _logits(policy)).abs().max()) < 1e-6
    assert float((_logits(back) - _logits(Policy.load(tiny_model_dir))).abs().max()) > 1e-4
    assert back.tokenizer_fingerprint == policy.tokenizer_fingerprint
    assert back.model_fingerprint == policy.model_fingerprint
    assert back.eos_token_id == policy.eos_token_id
    assert back.tokenizer.pad_token_id == policy.tokenizer.pad_token_id


def test_save_lora_policy_keeps_live_policy_trainable(tiny_model_dir, tmp_path):
    policy = Policy.load(tiny_model_dir, lora_rank=4, seed=0)
    learner = Learner(policy, learning_rate=1e-2)
    learner.step(_samples(policy))  # lora_B ≠ 0: the merged weights differ from the base
    live_type = type(policy.model)
    trainable = [n for n, p in policy.model.named_parameters() if p.requires_grad]
    logits = _logits(policy)

    policy.save(tmp_path / "merged")

    # the live policy is untouched: still a peft model with the same trainable adapters ...
    assert type(policy.model) is live_type and hasattr(policy.model, "peft_config")
    params = dict(policy.model.named_parameters())
    assert [n for n, p in params.items() if p.requires_grad] == trainable
    assert {id(p) for p in learner.params} == {id(params[n]) for n in trainable}
    assert torch.equal(_logits(policy), logits)
    # ... the checkpoint holds the merged weights, loadable without peft ...
    back = Policy.load(tmp_path / "merged")
    assert not any("lora_" in n for n, _ in back.model.named_parameters())
    assert float((_logits(back) - logits).abs().max()) < 1e-5
    # ... and training goes on: the next step still moves the adapters
    before = {n: params[n].detach().clone() for n in trainable}
    learner.step(_samples(policy, seed=1))
    assert any(not torch.equal(params[n], before[n]) for n in trainable)
    assert float((_logits(policy) - logits).abs().max()) > 0


def test_tokenizer_without_eos_is_a_clear_error(tiny_model_dir):
    from transformers import AutoTokenizer

    from swarm_node.policies.errors import PolicyError

    policy = Policy.load(tiny_model_dir)
    tok = AutoTokenizer.from_pretrained(str(tiny_model_dir))
    tok.eos_token = None
    with pytest.raises(PolicyError, match="no EOS token"):
        Policy(policy.model, tok, "no-eos")
