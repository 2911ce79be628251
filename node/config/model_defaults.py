"""The model settings a node picks itself for a real model on a CPU, where the user set none.

A pretrained model (one fetched from the registry, a .gguf file, a hub id, or a local folder with
at least ``REAL_MODEL_BYTES`` of weights) on a CPU trains a LoRA adapter (rank 16) unless
``model.lora_rank`` is given: full fine-tuning of even 135M parameters keeps AdamW's two moments
of every weight and a whole copy per checkpoint, for no measured gain at this scale; and it runs
in bfloat16 unless ``model.dtype`` is given, where the CPU computes bfloat16 natively
(avx512_bf16 or AMX) and the node follows no one's weights (a broadcast role needs one dtype
swarm-wide): faster per generated token there, at a cost to the behaviour log-probs'
agreement with the learner's (docs/results/bench_real_model.md measures both). Its held-out
evaluation is greedy only unless ``eval.samples`` is given: on a CPU four samples a question cost
about four times the greedy pass, several training steps each time. The embedded model and small
local models keep float32, full fine-tuning and sampled evaluation. Decided when the configuration is
read, so the resolved values are what config.json, the checkpoints and a resume see; the node says
at start what it chose.
"""

from __future__ import annotations

from pathlib import Path

__all__ = ["REAL_MODEL_BYTES", "DEFAULT_LORA_RANK", "is_real_model", "cpu_has_bf16", "real_model_defaults",
           "choose_real_model_defaults"]

REAL_MODEL_BYTES = 100 * 2 ** 20  # a local folder with this much weights is a pretrained model, not a toy
DEFAULT_LORA_RANK = 16
_WEIGHT_SUFFIXES = (".safetensors", ".bin", ".pt", ".gguf")


def is_real_model(name: str) -> bool:
    """Whether ``model.name`` names a pretrained model (never raises: a bad name is preflight's)."""
    from swarm_node.policies.errors import ModelSourceError
    from swarm_node.policies.model_source import model_kind

    try:
        kind = model_kind(name)
    except ModelSourceError:
        return False
    if kind in ("registry", "gguf", "hub"):
        return True
    if kind == "folder":
        return sum(p.stat().st_size for p in Path(name).expanduser().iterdir()
                   if p.suffix in _WEIGHT_SUFFIXES) >= REAL_MODEL_BYTES
    return False


def cpu_has_bf16() -> bool:
    """Whether this CPU computes bfloat16 natively (Linux's flags; False where it cannot tell)."""
    try:
        flags = Path("/proc/cpuinfo").read_text()
    except OSError:
        return False
    return "avx512_bf16" in flags or "amx_bf16" in flags


def real_model_defaults(name: str, device: str, given: set[str], role: str = "full",
                        eval_needs_samples: bool = False) -> dict[str, object]:
    """The settings to fill in, by dotted key (``model.lora_rank``, ``model.dtype``,
    ``eval.samples``), for ``name`` on ``device``, leaving out those in ``given`` (dotted keys the
    user set). A learner's workers apply its weights only if their model is the same, dtype
    included: with a broadcast role the dtype is never picked per CPU (one worker without native
    bfloat16 would refuse every version), only the rank. Sampled evaluation stays on where the
    evaluation needs it (greedy off, or pass@k asked)."""
    if not device.startswith("cpu") or not is_real_model(name):
        return {}
    out: dict[str, object] = {}
    if "model.lora_rank" not in given:
        out["model.lora_rank"] = DEFAULT_LORA_RANK
    if "model.dtype" not in given and role == "full" and cpu_has_bf16():
        out["model.dtype"] = "bfloat16"
    if "eval.samples" not in given and not eval_needs_samples:
        out["eval.samples"] = 0
    return out


def choose_real_model_defaults(cfg) -> dict[str, object]:
    """Fill ``real_model_defaults`` into a ``NodeConfig`` (its validator: the values are of each
    field's own type) where the user set nothing; what was chosen, by dotted key."""
    given = {f"{section}.{key}" for section in ("model", "eval") for key in getattr(cfg, section).model_fields_set}
    chosen = real_model_defaults(cfg.model.name, cfg.model.device, given, cfg.broadcast.role,
                                 eval_needs_samples=not cfg.eval.greedy or cfg.eval.pass_k > 0)
    for dotted, value in chosen.items():
        section, key = dotted.split(".")
        object.__setattr__(getattr(cfg, section), key, value)
    return chosen
