"""Picking a node's memory profile at start-up: ``--profile auto|none|8gb|12gb|...``.

``auto`` (the default) reads the free memory of the CUDA device the node will train on; a named
profile plans for a card of that size (also on a machine without one: ``--print-config`` shows
what a 12 GB card would run). The model's ``config.json`` and tokenizer give its shape and this
run's longest prompt; ``node.gpu.profiles`` chooses the settings. They fill only the keys the
user left unset (flags and the TOML file win); if what the user set is estimated over the
budget, the node says so before it starts, and out-of-memory recovery (policies/oom.py) is what
is left to it.
"""

from __future__ import annotations

import json
import logging
import math
from dataclasses import dataclass, replace
from pathlib import Path

from swarm_node.node.config.config import NodeConfig
from swarm_node.node.errors import ConfigError
from swarm_node.node.gpu.profiles import (GiB, PROFILES, Estimate, ModelShape, NoFit, Settings, Workload, choose_settings,
                                 estimate, free_device_memory, largest_class, usable)

log = logging.getLogger(__name__)

__all__ = ["PROFILE_CHOICES", "ProfilePlan", "plan_profile", "profile_overrides", "check_settings_fit"]

PROFILE_CHOICES = ("auto", "none", *PROFILES)
DEFAULT_PROMPT_TOKENS = 256  # when the tokenizer cannot be read before the model loads


@dataclass(frozen=True)
class ProfilePlan:
    source: str  # "--profile 12gb" or "free 11.2 of 11.7 GiB on cuda:0"
    budget: int  # bytes
    shape: ModelShape
    workload: Workload
    settings: Settings
    estimate: Estimate
    largest: str | None  # the largest Qwen2.5 size class this budget fits
    vllm: bool = False  # a vLLM engine samples beside the learner (planned for its share)
    card: int = 0  # the card's total bytes (vLLM's gpu_memory_utilization is a share of it); 0: the budget

    def vllm_utilization(self) -> float:
        """The engine's planned share as vLLM reads it: of the whole card, not of what was free."""
        share = self.estimate.vllm_share * self.budget / (self.card or self.budget)
        return max(0.05, math.ceil(round(100 * share, 6)) / 100)


def _resolved(name: str) -> str:
    """The folder (or hub id) ``model.name`` means (policies/model_source.py): a registry model or a
    .gguf file is fetched or converted first, as the load would."""
    from swarm_node.policies.errors import ModelSourceError
    from swarm_node.policies.model_source import resolve_model

    try:
        return resolve_model(name).path
    except ModelSourceError as e:
        raise ConfigError(str(e)) from None


def _model_config(name: str) -> dict:
    local = Path(name).expanduser()
    if local.is_dir():
        try:
            return json.loads((local / "config.json").read_text())
        except (OSError, ValueError) as e:
            raise ConfigError(f"cannot size model {name!r} for a memory profile: {local / 'config.json'}: {e}; "
                              f"pass --profile none to use the configured settings as they are") from None
    try:
        from transformers import AutoConfig

        return AutoConfig.from_pretrained(name).to_dict()
    except (OSError, ValueError) as e:
        raise ConfigError(f"cannot read the config of model {name!r} for a memory profile: {e}; pass "
                          f"--profile none to use the configured settings as they are") from None


def _prompt_tokens(cfg: NodeConfig, name: str) -> int:
    from swarm_node.node.run.preflight import longest_prompt

    try:
        from transformers import AutoTokenizer

        from swarm_node.policies.prompt_format import choose_format

        tok = AutoTokenizer.from_pretrained(name)
        fmt = choose_format(tok, cfg.generation.prompt_format, cfg.generation.system_prompt, cfg.generation.chat_example)
        longest = longest_prompt(lambda texts: tok(texts, add_special_tokens=False)["input_ids"],
                                 lambda task: fmt.text(tok, task.question), cfg)
    except Exception:  # noqa: BLE001 (no loadable tokenizer: the model load says why; plan for long prompts)
        return DEFAULT_PROMPT_TOKENS
    return longest if longest > 0 else DEFAULT_PROMPT_TOKENS  # an empty vocabulary encodes nothing


def plan_profile(cfg: NodeConfig, profile: str) -> ProfilePlan | None:
    """The settings ``profile`` gives this run, or None where no profile applies (``none``; the
    embedded default model, which is tiny; ``auto`` without a CUDA device)."""
    if profile == "none":
        return None
    if profile not in PROFILE_CHOICES:
        raise ConfigError(f"unknown --profile {profile!r}; choose one of {', '.join(PROFILE_CHOICES)}")
    if cfg.model.name == "default":
        log.info("memory profile: none needed (the embedded default model has a few million parameters)")
        return None
    bf16 = True
    if profile == "auto":
        mem = free_device_memory(cfg.model.device)
        if mem is None:
            log.info("memory profile: none (model.device is %s, not a CUDA device): the configured settings are "
                     "used; --profile 8gb|12gb|16gb|24gb|40gb|80gb plans for a card of that size", cfg.model.device)
            return None
        free, total = mem
        card = total
        budget, source = free, f"free {free / GiB:.1f} of {total / GiB:.1f} GiB on {cfg.model.device}"
        import torch

        bf16 = torch.cuda.is_bf16_supported()
    else:
        budget, source = PROFILES[profile] * GiB, f"--profile {profile}"
        card = budget
    name = _resolved(cfg.model.name)
    shape = ModelShape.from_config(_model_config(name))
    w = Workload(rows=cfg.generation.prompts_per_step * cfg.group_size, prompt_tokens=_prompt_tokens(cfg, name),
                 completion_tokens=cfg.generation.max_completion_length)
    vllm = _vllm_samples(cfg)
    # Generation overlapped with learning on this card holds a second copy of the weights.
    overlap = cfg.train.max_async > 0 and (cfg.generation.device or cfg.model.device) == cfg.model.device
    try:
        settings, est = choose_settings(shape, budget, w, bf16=bf16, vllm=vllm, overlap=overlap)
    except NoFit as e:
        raise ConfigError(f"memory profile ({source}): {e}") from None
    return ProfilePlan(source, budget, shape, w, settings, est, largest_class(budget, w, bf16=bf16), vllm, card)


def _vllm_samples(cfg: NodeConfig) -> bool:
    """Whether this run's generation backend will be vLLM (its engine then takes a share of the card)."""
    from swarm_node.node.run.wiring import generation_backend  # here: wiring loads the model stack

    try:
        return generation_backend(cfg) == "vllm"
    except ConfigError:
        return False  # the node refuses this configuration when it starts, and says why


def profile_overrides(plan: ProfilePlan) -> dict:
    """Config keys the plan sets (flags and the TOML file still win over them)."""
    s, rows = plan.settings, plan.workload.rows
    return {"model.dtype": s.dtype, "model.lora_rank": s.lora_rank,
            "model.gradient_checkpointing": s.gradient_checkpointing,
            "learner.micro_batch_size": 0 if s.micro_batch >= rows else s.micro_batch,
            "generation.batch_size": 0 if s.generation_batch >= rows else s.generation_batch,
            "generation.max_completion_length": s.max_completion_length,
            # Used only if vLLM samples (generation.backend): its engine's share of the card.
            "generation.vllm_gpu_memory_utilization": plan.vllm_utilization()}


def describe(plan: ProfilePlan) -> list[str]:
    """What is printed at start: the choice, its estimate and the card's reach."""
    w = plan.workload
    lines = [f"memory profile ({plan.source}): a {plan.shape.params / 1e9:.2f}B-parameter model, "
             f"{w.rows} completions a step of up to {w.prompt_tokens} + {w.completion_tokens} tokens -> "
             f"{plan.settings.describe()}",
             f"memory estimate: {plan.estimate.describe()}; budget {plan.budget / GiB:.1f} GiB less a 15% margin",
             (f"generation: a vLLM engine, planned at gpu_memory_utilization {plan.vllm_utilization():.2f} of the "
              f"card; the learner has the rest" if plan.vllm else
              f"a vLLM engine beside the learner would take gpu_memory_utilization {plan.vllm_utilization():.2f}")
             + f"; the largest Qwen2.5 size this budget fits: {plan.largest or 'none'}"]
    if plan.settings.max_completion_length < w.completion_tokens:
        lines.append(f"generation.max_completion_length lowered from {w.completion_tokens} to "
                     f"{plan.settings.max_completion_length}: longer completions do not fit")
    return lines


def _value(cfg: NodeConfig, key: str):
    section, name = key.split(".")
    return getattr(getattr(cfg, section), name)


def check_settings_fit(plan: ProfilePlan, cfg: NodeConfig) -> str | None:
    """A warning if the settings the run ends with (the user's where they set them) are
    estimated over the budget the profile planned for."""
    kept = {k: _value(cfg, k) for k, v in profile_overrides(plan).items() if _value(cfg, k) != v}
    if not kept:
        return None
    final = Settings(dtype=cfg.model.dtype, lora_rank=cfg.model.lora_rank, micro_batch=cfg.learner.micro_batch_size,
                     gradient_checkpointing=cfg.model.gradient_checkpointing,
                     generation_batch=cfg.generation.batch_size,
                     max_completion_length=cfg.generation.max_completion_length)
    est = estimate(plan.shape, final, replace(plan.workload, completion_tokens=cfg.generation.max_completion_length))
    limit = usable(plan.budget)
    if plan.vllm:  # the engine holds its share and does the generating
        limit = usable(max(0, int(plan.budget - cfg.generation.vllm_gpu_memory_utilization * (plan.card or plan.budget))))
        est = replace(est, generation=0)
    if est.peak <= limit:
        return None
    shown = ", ".join(f"{k} {json.dumps(v)}" for k, v in kept.items())
    return (f"your settings ({shown}) are estimated at a peak of {est.peak / GiB:.1f} GiB, over the "
            f"{limit / GiB:.1f} GiB this profile plans for ({plan.source}, less the margin). "
            f"The node will halve its batches when it runs out of memory; the profile would run: "
            f"{plan.settings.describe()}")
