"""The policy a node's config names: the model resolved (the embedded one built, a registry model
fetched, a .gguf file converted: policies/model_source.py), loaded with the config's precision,
device and adapter, and prompted in the format the config asks for. The training node, ``swarm-node
eval`` and the adversary load their policy here.
"""

from __future__ import annotations

import logging

from swarm_node.node.config.config import NodeConfig
from swarm_node.node.errors import ConfigError
from swarm_node.node.observe.status import Phase
from swarm_node.policies.errors import PolicyError
from swarm_node.policies.policy import Policy
from swarm_node.policies.prompt_format import choose_format

# The node's log name, as before loading left trainer.py: log filters select it.
log = logging.getLogger("swarm_node.node.run.trainer")

__all__ = ["load_policy"]


# The start-up phase (status.json, the live line) while a model the node makes itself is prepared.
_PREPARING = {"default": "building the embedded default model", "registry": "fetching the model",
              "gguf": "converting the model"}


def load_policy(cfg: NodeConfig, phase: Phase | None = None) -> Policy:
    """The configured policy; ``model.name`` resolves through policies/model_source.py (the
    embedded or a registry model, built or fetched once and cached; a .gguf file, converted once).
    ``phase`` hears which start-up phase this is in (building, loading)."""
    from swarm_node.node.config.model_defaults import is_real_model
    from swarm_node.policies.errors import ModelSourceError
    from swarm_node.policies.model_source import model_kind, resolve_model

    phase = phase or (lambda name, detail="": None)
    try:
        doing = _PREPARING.get(model_kind(cfg.model.name), "preparing the model")
        model = resolve_model(cfg.model.name, progress=lambda d: phase(doing, d))
    except ModelSourceError as e:  # what the user named cannot be had: their input, exit 2
        raise ConfigError(str(e)) from None
    name = model.path
    phase("loading the model", model.label)
    if cfg.chosen:  # node/config/model_defaults.py
        log.info("a pretrained model on a CPU: %s (chosen because not given; set them to change it)",
                 ", ".join(f"--{k} {v}" for k, v in cfg.chosen.items()))
    try:
        policy = Policy.load(name, dtype=cfg.model.dtype, device=cfg.model.device,
                             lora_rank=cfg.model.lora_rank, lora_alpha=cfg.model.lora_alpha,
                             seed=cfg.train.seed, gradient_checkpointing=cfg.model.gradient_checkpointing)
    except PolicyError as e:  # a model that cannot serve as a policy (no EOS, no tokenizer...): exit 2
        raise ConfigError(str(e)) from None
    if policy.adapter_only and cfg.model.device.startswith("cpu") and cfg.model.dtype == "float32":
        # A CPU spends a share of each sampled token on the adapter's matmuls. Only in float32: folded
        # into bfloat16 weights, an adapter update below half a bfloat16 step of W rounds away
        # (peft adds it to the layer's output instead), and the sampler would lag the learner.
        policy.merge_for_sampling()
    try:
        policy.prompt_format = choose_format(policy.tokenizer, cfg.generation.prompt_format, cfg.generation.system_prompt,
                                             cfg.generation.chat_example)
    except ValueError as e:
        raise ConfigError(f"{cfg.model.name}: {e}") from None
    log.info("prompts: %s", policy.prompt_format.describe())
    if policy.prompt_format.kind == "raw" and is_real_model(cfg.model.name):
        # auto fell back (or raw was asked): an instruct model may not follow swarm-node's template.
        log.warning("%s has no chat template%s: prompts are swarm-node's raw template (Q: ...\\nA: ), which a "
                    "pretrained model may not follow; answers are read %s", cfg.model.name,
                    "" if cfg.generation.prompt_format == "auto" else " in use (generation.prompt_format raw)",
                    "from the <answer> block only (tasks.answer auto)" if cfg.tasks.answer == "auto" else
                    f"as tasks.answer {cfg.tasks.answer} says")
    return policy
