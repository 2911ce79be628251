"""Memory profiles: the parameter counts, the activation estimate against what autograd really
keeps, the choice for each card size, and ``--profile`` on the command line."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from swarm_node.node.gpu.profiles import (GiB, PROFILES, QWEN25, ModelShape, NoFit, Settings, Workload, _candidates,
                                 choose_settings, estimate, largest_class, usable)

from tests.helpers.paths import ROOT
SMALL = [dict(hidden_size=256, intermediate_size=1024, num_hidden_layers=4, vocab_size=4096, num_attention_heads=4,
              num_key_value_heads=2),
         dict(hidden_size=512, intermediate_size=2048, num_hidden_layers=2, vocab_size=8192, num_attention_heads=8,
              num_key_value_heads=2)]
WORKLOAD = Workload(rows=64, prompt_tokens=128, completion_tokens=256)  # docs/results/memory_profiles.md


def _qwen2(tied: bool = True, **shape):
    from transformers import Qwen2Config, Qwen2ForCausalLM

    torch.manual_seed(0)
    cfg = Qwen2Config(tie_word_embeddings=tied, max_position_embeddings=1024, **shape)
    return Qwen2ForCausalLM(cfg), cfg


@pytest.mark.parametrize("tied", [True, False])
def test_parameter_counts_are_the_models(tied):
    from peft import LoraConfig, get_peft_model

    model, cfg = _qwen2(tied, **SMALL[0])
    shape = ModelShape.from_config(cfg.to_dict())
    assert shape.params == sum(p.numel() for p in model.parameters())
    lora = get_peft_model(model, LoraConfig(r=4, target_modules="all-linear"))
    assert shape.lora_params(4) == sum(p.numel() for p in lora.parameters() if p.requires_grad)


def test_size_classes_have_the_published_sizes():
    published = {"0.5B": 0.494e9, "1.5B": 1.544e9, "3B": 3.086e9, "7B": 7.616e9, "14B": 14.77e9}
    for name, n in published.items():
        assert QWEN25[name].params == pytest.approx(n, rel=0.01), name


def _saved_bytes(model, m: int, S: int, T: int) -> int:
    """Bytes autograd keeps for the learner's forward (weights excluded), as Policy runs it."""
    weights = {p.untyped_storage().data_ptr() for p in model.parameters()}
    seen: dict[int, int] = {}

    def pack(t):
        ptr = t.untyped_storage().data_ptr()
        if ptr not in weights:
            seen[ptr] = max(seen.get(ptr, 0), t.untyped_storage().nbytes())
        return t

    ids = torch.randint(0, model.config.vocab_size, (m, S))
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        logits = model(input_ids=ids, logits_to_keep=T + 1).logits
        torch.log_softmax(logits[:, :-1].float(), -1).gather(-1, ids[:, -T:].unsqueeze(-1))
    return sum(seen.values())


@pytest.mark.parametrize("ckpt", [False, True])
@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
@pytest.mark.parametrize("small", [0, 1])
def test_activation_estimate_is_what_autograd_keeps(small, dtype, ckpt):
    torch.set_num_threads(1)
    model, cfg = _qwen2(**SMALL[small])
    model = model.to(getattr(torch, dtype))
    if ckpt:
        model.activation_checkpointing_enable(activation_checkpointing_kwargs={"use_reentrant": False})
    model.eval()
    for layer in model.model.layers:  # as Policy.learning_mode leaves them
        layer.training = ckpt
    m, P, T = 4, 64, 32
    measured = _saved_bytes(model, m, P + T, T)
    e = estimate(ModelShape.from_config(cfg.to_dict()), Settings(dtype=dtype, gradient_checkpointing=ckpt),
                 Workload(m, P, T))
    saved = e.learner_activations + m * T * cfg.vocab_size * 4  # + log-softmax's float32 output
    assert 0.8 <= saved / measured <= 1.25, (saved, measured)


def test_every_card_gets_settings_that_fit_and_more_memory_never_gets_less():
    for name in ("0.5B", "1.5B", "3B"):
        shape, rank = QWEN25[name], []
        ladder = list(_candidates(shape, WORKLOAD, True))
        for gb in PROFILES.values():
            try:
                s, e = choose_settings(shape, gb * GiB, WORKLOAD)
            except NoFit:
                assert not rank, f"{name} fits a smaller card than {gb} GB but not this one"
                continue
            assert e.peak <= usable(gb * GiB)
            if s.max_completion_length == WORKLOAD.completion_tokens:
                rank.append(ladder.index(Settings(s.dtype, s.lora_rank, s.micro_batch, s.gradient_checkpointing,
                                                  max_completion_length=s.max_completion_length)))
        assert rank == sorted(rank, reverse=True), (name, rank)  # earlier in the ladder = more capable
    assert [largest_class(gb * GiB, WORKLOAD) for gb in (8, 12, 16, 24, 80)] == ["1.5B", "3B", "3B", "7B", "14B"]


def test_a_model_too_big_for_the_card_is_a_clear_error():
    with pytest.raises(NoFit, match="does not fit 8.0 GiB even with LoRA rank 8, gradient checkpointing"):
        choose_settings(QWEN25["14B"], 8 * GiB, WORKLOAD)
    s, _ = choose_settings(QWEN25["3B"], 8 * GiB, WORKLOAD)  # fits by giving up completion length
    assert s.max_completion_length < WORKLOAD.completion_tokens and s.lora_rank


def test_the_docs_table_is_what_the_code_chooses():
    from memory_profiles import table  # scripts/ is on pytest's pythonpath
    doc = (ROOT / "docs" / "results" / "memory_profiles.md").read_text()
    assert table() in doc, "docs/results/memory_profiles.md is stale: run python scripts/memory_profiles.py"


# -- on the command line --------------------------------------------------------------------------

@pytest.fixture(scope="module")
def half_b_dir(tmp_path_factory, tiny_model_dir) -> Path:
    """Qwen2.5-0.5B's config beside a real tokenizer (no weights: a profile reads only these)."""
    from transformers import Qwen2Config

    d = tmp_path_factory.mktemp("qwen05-config")
    Qwen2Config(hidden_size=896, intermediate_size=4864, num_hidden_layers=24, vocab_size=151936,
                num_attention_heads=14, num_key_value_heads=2, tie_word_embeddings=True).save_pretrained(d)
    for f in Path(tiny_model_dir).iterdir():
        if "token" in f.name or f.name == "special_tokens_map.json":
            (d / f.name).write_bytes(f.read_bytes())
    return d


def _join(model: Path, *flags: str, cwd: Path):
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    r = subprocess.run([sys.executable, "-m", "swarm_node.node.cli", "join", "--new-swarm", "--print-config",
                        "--model.name", str(model), *flags], capture_output=True, text=True, env=env, cwd=cwd,
                       timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    return json.loads(r.stdout), r.stderr


@pytest.mark.subprocess
def test_profile_sets_what_the_user_left_unset_and_says_so(half_b_dir, tmp_path):
    real = ("--generation.max_completion_length", "256")  # a real model's completions, not the default's 16
    cfg, err = _join(half_b_dir, "--profile", "8gb", *real, cwd=tmp_path)
    assert "memory profile (--profile 8gb): a 0.49B-parameter model" in err and "memory estimate: peak" in err
    assert "the largest Qwen2.5 size this budget fits" in err
    assert cfg["model"]["dtype"] == "bfloat16" and cfg["model"]["lora_rank"] == 64
    assert cfg["learner"]["micro_batch_size"] == 8 and cfg["model"]["gradient_checkpointing"] is True
    assert cfg["generation"]["max_completion_length"] == 256
    # The user's settings win; over the budget, the node says so before it starts.
    cfg, err = _join(half_b_dir, "--profile", "8gb", *real, "--model.lora_rank", "0", "--model.dtype", "float32",
                     "--learner.micro_batch_size", "0", cwd=tmp_path)
    assert cfg["model"]["lora_rank"] == 0 and cfg["model"]["dtype"] == "float32"
    assert "your settings (" in err and "over the" in err and "will halve its batches" in err


@pytest.mark.subprocess
def test_no_profile_without_a_gpu_or_with_none(half_b_dir, tmp_path):
    from swarm_node.node.config.config import load_config

    defaults = json.loads(load_config(None, {"model.name": str(half_b_dir)}).to_json())
    for flags, said in ((("--profile", "none"), None), ((), "not a CUDA device")):
        cfg, err = _join(half_b_dir, *flags, cwd=tmp_path)
        assert cfg["model"] == defaults["model"] and cfg["learner"] == defaults["learner"]
        assert (said in err) if said else ("memory profile" not in err)


def test_with_vllm_the_learner_fits_beside_the_engines_share():
    for gb in (12, 24, 80):
        s, e = choose_settings(QWEN25["0.5B"], gb * GiB, WORKLOAD, vllm=True)
        plain, _ = choose_settings(QWEN25["0.5B"], gb * GiB, WORKLOAD)
        assert 0 < e.vllm_share < 1 and e.generation == 0  # the engine generates, in its own share
        assert e.peak <= usable(int(gb * GiB * (1 - e.vllm_share)))
        ladder = list(_candidates(QWEN25["0.5B"], WORKLOAD, True))
        index = lambda x: ladder.index(Settings(x.dtype, x.lora_rank, x.micro_batch,  # noqa: E731
                                                x.gradient_checkpointing, max_completion_length=256))
        assert index(s) >= index(plain)  # less room for the learner: never more capable settings


def test_auto_reads_the_free_memory_and_gives_vllm_its_share_of_the_whole_card(half_b_dir, monkeypatch):
    """``--profile auto`` on a (faked) CUDA card with 8 of 24 GiB free: the plan is for the 8 GiB,
    and the vLLM engine's share, which vLLM reads as a share of the whole card, is converted so it
    takes what the plan gave it and no more."""
    import swarm_node.node.gpu.select as ps
    from swarm_node.node.config.config import load_config

    monkeypatch.setattr(ps, "free_device_memory", lambda device: (8 * GiB, 24 * GiB))
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda *a, **k: True)
    monkeypatch.setattr(ps, "_vllm_samples", lambda cfg: True)
    cfg = load_config(None, {"model.name": str(half_b_dir), "model.device": "cuda:0",
                             "generation.max_completion_length": 256})
    plan = ps.plan_profile(cfg, "auto")
    assert plan.source == "free 8.0 of 24.0 GiB on cuda:0" and plan.budget == 8 * GiB and plan.card == 24 * GiB
    share = plan.estimate.vllm_share  # of the 8 GiB planned for
    util = ps.profile_overrides(plan)["generation.vllm_gpu_memory_utilization"]
    assert util * 24 * GiB >= share * 8 * GiB and (util - 0.01) * 24 * GiB < share * 8 * GiB
    assert any(f"gpu_memory_utilization {util:.2f} of the card" in line for line in ps.describe(plan))
    # The same plan from --profile 8gb is for a card of 8 GiB: the share is the estimate's own.
    fixed = ps.plan_profile(cfg, "8gb")
    assert fixed.card == fixed.budget and ps.profile_overrides(fixed)["generation.vllm_gpu_memory_utilization"] == \
        max(0.05, fixed.estimate.vllm_share)


def test_overlap_on_one_card_fits_a_second_copy_and_both_sides_at_once():
    """With train.max_async on the learner's card, the chosen settings' peak counts the generating
    copy and generation beside the learner (not the larger of the two), and still fits."""
    shape = QWEN25["1.5B"]
    for gib in (24, 80):
        budget = gib * GiB
        s0, e0 = choose_settings(shape, budget, WORKLOAD)
        s1, e1 = choose_settings(shape, budget, WORKLOAD, overlap=True)
        assert e1.overlap and not e0.overlap
        assert e1.peak == e1.context + 2 * e1.weights + e1.trained_state + e1.learner + e1.generation
        assert e1.peak <= usable(budget)
        assert "generating copy" in e1.describe()
        # Less room for the same work: never a larger generation batch or micro-batch than alone.
        assert (s1.generation_batch or WORKLOAD.rows) <= (s0.generation_batch or WORKLOAD.rows)
        assert (s1.micro_batch or WORKLOAD.rows) <= (s0.micro_batch or WORKLOAD.rows)
