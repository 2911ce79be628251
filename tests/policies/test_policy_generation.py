"""Tests of policies.policy's generation: G completions per prompt, EOS handling, halving the rows on
out-of-memory, behaviour log-probs that match a fresh forward pass, and what generation samples
from (a checkpoint's distorting settings switched off).

Every model here is the tiny locally-built Qwen2 of ``tests/conftest.py`` (no download).
"""

from __future__ import annotations

import copy

import pytest
import torch

from swarm_node.policies.policy import Policy, SamplingParams, TokenBatch
from tests.policies.test_policy import PROMPTS

pytestmark = pytest.mark.usefixtures("one_torch_thread")  # tests/conftest.py


def _bias_eos(policy: Policy, bonus: float):
    """Add ``bonus`` to the EOS logit on every forward (generate and recompute alike)."""
    eos = policy.eos_token_id

    def hook(module, inputs, output):
        output = output.clone()
        output[..., eos] += bonus
        return output

    return policy.model.get_output_embeddings().register_forward_hook(hook)


def _flat(groups):
    return [c for g in groups for c in g]


def _behaviour_matrix(completions, T: int) -> torch.Tensor:
    beh = torch.zeros(len(completions), T)
    for i, c in enumerate(completions):
        beh[i, :len(c.logprobs)] = torch.tensor(c.logprobs)
    return beh


# -------------------------------------------------------------------------------- generation


def test_generate_returns_g_completions_per_prompt(tiny_model_dir):
    policy = Policy.load(tiny_model_dir)
    prompt_ids = policy.encode_prompts(PROMPTS)
    assert len({len(p) for p in prompt_ids}) == len(PROMPTS)  # all different lengths
    torch.manual_seed(0)
    groups = policy.generate(PROMPTS, 4, SamplingParams(max_new_tokens=10))
    assert len(groups) == len(PROMPTS)
    for ids, group in zip(prompt_ids, groups):
        assert len(group) == 4
        for c in group:
            assert c.prompt_ids == ids
            assert 1 <= len(c.completion_ids) <= 10
            assert all(isinstance(t, int) for t in c.completion_ids)
            assert len(c.logprobs) == len(c.completion_ids)
            assert all(v <= 0.0 and v > -1e4 for v in c.logprobs)
            assert c.seq_logprob == pytest.approx(sum(c.logprobs))
            assert c.text == policy.tokenizer.decode(c.completion_ids, skip_special_tokens=True)
            assert c.truncated == (policy.eos_token_id not in c.completion_ids)
            if c.truncated:
                assert len(c.completion_ids) == 10
    assert not policy.model.training  # generate restores the mode it found
    with pytest.raises(ValueError):
        policy.generate(PROMPTS, 0)


def _oom_generate_above(policy, monkeypatch, rows: int) -> list[int]:
    """``model.generate`` over more than ``rows`` rows raises CUDA's out-of-memory error."""
    real, calls = policy.model.generate, []

    def generate(**kw):
        calls.append(int(kw["input_ids"].shape[0]))
        if calls[-1] > rows:
            raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 9.00 GiB (injected)")
        return real(**kw)

    monkeypatch.setattr(policy.model, "generate", generate)
    return calls


def test_generation_out_of_memory_halves_the_rows_and_keeps_every_completion(tiny_model_dir, monkeypatch):
    policy = Policy.load(tiny_model_dir)
    calls = _oom_generate_above(policy, monkeypatch, 3)
    prompt_ids = policy.encode_prompts(PROMPTS)
    groups = policy.generate(PROMPTS, 4, SamplingParams(max_new_tokens=6))
    n = 4 * len(PROMPTS)
    # all rows fail, then half; a quarter fits and is kept: the rest go a quarter at a time.
    assert calls[:3] == [n, n // 2, n // 4] and all(c == n // 4 for c in calls[2:]) and sum(calls[2:]) == n
    assert policy.generation_batch_size == n // 4 and policy.generation_oom_halvings == 2
    assert [len(g) for g in groups] == [4] * len(PROMPTS)
    for ids, group in zip(prompt_ids, groups):  # each completion still under its own prompt
        assert all(c.prompt_ids == ids and len(c.logprobs) == len(c.completion_ids) for c in group)
    calls.clear()
    policy.generate(PROMPTS, 4, SamplingParams(max_new_tokens=6))
    assert calls == [n // 4] * 4 and policy.generation_oom_halvings == 2  # no failed attempt again


def test_generation_that_does_not_fit_one_row_is_a_clear_error(tiny_model_dir, monkeypatch):
    from swarm_node.policies.oom import OutOfMemory

    policy = Policy.load(tiny_model_dir)
    _oom_generate_above(policy, monkeypatch, 0)
    with pytest.raises(OutOfMemory, match="generation does not fit in memory even one row at a time.*max_completion_length"):
        policy.generate(PROMPTS, 2)


def test_generate_restores_training_mode(tiny_model_dir):
    policy = Policy.load(tiny_model_dir)
    policy.model.train()
    policy.generate(PROMPTS[:1], 2, SamplingParams(max_new_tokens=3))
    assert policy.model.training


def test_generate_stops_at_first_eos_inclusive(tiny_model_dir):
    policy = Policy.load(tiny_model_dir)
    eos = policy.eos_token_id
    _bias_eos(policy, 4.0)  # EOS ~ 1/3 per token: a mix of finished and truncated completions
    torch.manual_seed(0)
    comps = _flat(policy.generate(PROMPTS, 8, SamplingParams(max_new_tokens=6)))
    finished = [c for c in comps if not c.truncated]
    truncated = [c for c in comps if c.truncated]
    assert finished and truncated
    for c in finished:
        assert c.completion_ids[-1] == eos  # EOS included ...
        assert eos not in c.completion_ids[:-1]  # ... and it is the first one
        assert "<eos>" not in c.text
    for c in truncated:
        assert len(c.completion_ids) == 6 and eos not in c.completion_ids
    assert len({len(c.completion_ids) for c in comps}) > 2  # rows of the batch end at different steps


def test_generate_immediate_eos(tiny_model_dir):
    policy = Policy.load(tiny_model_dir)
    _bias_eos(policy, 60.0)
    for c in _flat(policy.generate(PROMPTS, 3, SamplingParams(max_new_tokens=5))):
        assert c.completion_ids == (policy.eos_token_id,)
        assert c.text == "" and not c.truncated
        assert c.logprobs[0] == pytest.approx(0.0, abs=1e-4)


def test_generate_when_pad_is_eos(tiny_model_dir):
    """A tokenizer without a pad token pads with EOS: the first EOS still ends the completion."""
    base = Policy.load(tiny_model_dir)
    tok = copy.deepcopy(base.tokenizer)
    tok.pad_token = None
    policy = Policy(base.model, tok, "pad-is-eos")
    assert tok.pad_token_id == policy.eos_token_id
    _bias_eos(policy, 3.0)
    torch.manual_seed(1)
    comps = _flat(policy.generate(PROMPTS, 6, SamplingParams(max_new_tokens=8)))
    assert any(not c.truncated and len(c.completion_ids) < 8 for c in comps)
    for c in comps:
        assert policy.eos_token_id not in c.completion_ids[:-1]
        assert c.truncated == (c.completion_ids[-1] != policy.eos_token_id)


# ----------------------------------------------------------------- behaviour log-prob checks


@pytest.mark.parametrize("eos_bias", [0.0, 3.0])  # 3.0: completions of unequal length
@pytest.mark.parametrize("temperature", [0.7, 1.0])
def test_behaviour_logprobs_match_batched_forward(tiny_model_dir, temperature, eos_bias):
    policy = Policy.load(tiny_model_dir)
    if eos_bias:
        _bias_eos(policy, eos_bias)
    torch.manual_seed(2)
    comps = _flat(policy.generate(PROMPTS, 3, SamplingParams(max_new_tokens=8,
                                                             temperature=temperature)))
    assert len({len(c.prompt_ids) for c in comps}) == len(PROMPTS)  # left padding is exercised
    if eos_bias:
        assert len({len(c.completion_ids) for c in comps}) > 1  # right padding too
    batch = TokenBatch.build([c.prompt_ids for c in comps], [c.completion_ids for c in comps],
                             policy.tokenizer.pad_token_id)
    with torch.no_grad():
        logp = policy.completion_logprobs(batch, temperature)
    beh = _behaviour_matrix(comps, logp.shape[1])
    assert logp.shape == batch.completion_mask.shape
    assert float((logp - beh).abs().max()) < 1e-4
    assert float((logp * (1 - batch.completion_mask)).abs().max()) == 0.0  # 0 on padding


@pytest.mark.parametrize("temperature", [0.7, 1.0])
def test_behaviour_logprobs_match_unpadded_forward(tiny_model_dir, temperature):
    """One row at a time, no padding, no attention mask, default positions: the plain model."""
    policy = Policy.load(tiny_model_dir)
    _bias_eos(policy, 2.0)
    torch.manual_seed(3)
    comps = _flat(policy.generate(PROMPTS, 2, SamplingParams(max_new_tokens=8,
                                                             temperature=temperature)))
    worst = 0.0
    for c in comps:
        ids = torch.tensor([list(c.prompt_ids) + list(c.completion_ids)])
        P = len(c.prompt_ids)
        with torch.no_grad():
            logits = policy.model(input_ids=ids).logits[0].float() / temperature
        ref = torch.log_softmax(logits[P - 1:-1], -1).gather(-1, ids[0, P:, None]).squeeze(-1)
        worst = max(worst, float((ref - torch.tensor(c.logprobs)).abs().max()))
    assert worst < 1e-4


# ------------------------------------------------------------- what generation samples from


def test_a_checkpoints_distorting_generation_settings_are_switched_off(tiny_model_dir, tmp_path, caplog):
    """A checkpoint asking for a repetition penalty, a minimum length and a banned word: each
    would change what is sampled but not the log-probs recorded. Loaded, they are named in a
    warning and off, so the recorded log-probs still match the learner's recompute, and EOS can
    still come first (min_new_tokens would forbid it)."""
    import shutil

    from transformers import GenerationConfig

    ckpt = tmp_path / "ckpt"
    shutil.copytree(tiny_model_dir, ckpt)
    GenerationConfig(repetition_penalty=1.3, min_new_tokens=4, bad_words_ids=[[7]], do_sample=True,
                     top_k=50).save_pretrained(ckpt)
    with caplog.at_level("WARNING"):
        policy = Policy.load(ckpt)
    assert sorted(s.split("=")[0] for s in policy.neutralised_settings) == [
        "bad_words_ids", "min_new_tokens", "repetition_penalty"]
    assert "repetition_penalty=1.3" in caplog.text
    _bias_eos(policy, 6.0)  # EOS first is likely: a minimum length would forbid it
    torch.manual_seed(0)
    comps = _flat(policy.generate(PROMPTS, 4, SamplingParams(max_new_tokens=8)))
    assert any(len(c.completion_ids) == 1 for c in comps)
    batch = TokenBatch.build([c.prompt_ids for c in comps], [c.completion_ids for c in comps],
                             policy.tokenizer.pad_token_id)
    with torch.no_grad():
        logp = policy.completion_logprobs(batch)
    assert float((logp - _behaviour_matrix(comps, logp.shape[1])).abs().max()) < 1e-4


def test_behaviour_logprobs_are_those_of_the_full_logits_path(tiny_model_dir):
    """The step-by-step recorder gives what gathering from every step's logits gave (the old
    path, which kept B x T x V floats), for the same sampled tokens; with temperature and top-k
    warping the scores after it (it keeps transformers' scores tensor one step: this also shows
    nothing modified it in place)."""
    from transformers import LogitsProcessorList

    from swarm_node.policies.sampling import BehaviourLogprobs

    policy = Policy.load(tiny_model_dir)
    batch = TokenBatch.build(policy.encode_prompts(PROMPTS), [()] * 3, policy.tokenizer.pad_token_id)
    P = batch.prompt_len
    rec = BehaviourLogprobs(0.7, P)
    torch.manual_seed(1)
    out = policy.model.generate(input_ids=batch.input_ids[:, :P], attention_mask=batch.attention_mask[:, :P],
                                do_sample=True, temperature=0.7, top_k=20, top_p=0.9, max_new_tokens=6,
                                eos_token_id=policy.eos_token_id, pad_token_id=policy.tokenizer.pad_token_id,
                                logits_processor=LogitsProcessorList([rec]), output_logits=True,
                                return_dict_in_generate=True)
    new = out.sequences[:, P:]
    full = torch.log_softmax(torch.stack(out.logits, 1).float() / 0.7, -1).gather(-1, new[..., None])[..., 0]
    assert rec.finish(out.sequences).shape == new.shape
    assert float((rec.logprobs - full).abs().max()) < 1e-5


def test_learner_logprobs_compute_logits_for_completion_columns_only(tiny_model_dir, monkeypatch):
    policy = Policy.load(tiny_model_dir)
    assert policy._keeps_logits  # Qwen2 takes logits_to_keep
    batch = TokenBatch.build([(5, 6, 7, 8), (9,)], [(10, 11), (12, 13, 14)], int(policy.tokenizer.pad_token_id))
    shapes = []
    policy.model.register_forward_hook(lambda m, a, out: shapes.append(tuple(out.logits.shape)))
    kept = policy.completion_logprobs(batch)
    monkeypatch.setattr(policy, "_keeps_logits", False)
    full = policy.completion_logprobs(batch)
    V = policy.model.config.vocab_size
    assert shapes == [(2, 3 + 1, V), (2, 4 + 3, V)]  # T + 1 columns, then every column
    torch.testing.assert_close(kept, full, rtol=0, atol=1e-6)
