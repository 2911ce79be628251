"""Memory profiles: what a node can train on a card of a given size, estimated before it loads.

Most people who join a public swarm have one 8–24 GB GPU, and the usual failure is an
out-of-memory crash hours in. ``swarm-node join`` reads the device's free memory (or takes
``--profile 12gb``) and ``choose_settings`` picks, from the model's config alone, the most
capable settings whose estimated peak fits with a margin: full fine-tuning or a LoRA rank, the
micro-batch, gradient checkpointing, bf16, the generation batch, and the share a vLLM engine
would take. The estimate is a sum of named terms (``Estimate``), each a closed formula:

- weights: parameters × bytes (bf16: 2);
- trained state: full fine-tuning keeps a gradient and AdamW's two moments in the weights' dtype
  (3 × weights); LoRA keeps its adapter, gradient and moments in float32 (16 B a parameter);
- learner activations, per token and layer: b·(2h + 4q + 3kv + 4I) + 2·(4 + b)·h bytes (the
  inputs autograd keeps for every projection, rotary, attention and SwiGLU, and RMSNorm's float32
  copies), or b·h with gradient checkpointing plus one layer being recomputed; checked against
  what autograd really saves for a Qwen2 model (tests/node/gpu/test_memory_profile.py: within 25%);
- learner logits: completion tokens × vocabulary × (b + 8) bytes (the model's logits, their
  float32 copy and log-softmax, and the gradient going back: ``logits_to_keep`` keeps prompts out);
- generation (transformers backend): the KV cache, 2·L·kv·b bytes a token, for the rows of one
  ``generate`` call, and three float32 (rows, V) tensors a step.

Generation and the learner run one after the other, so the peak is the resident part (weights,
trained state, CUDA's context) plus the larger of the two; with generation overlapped with learning
on the same card (``train.max_async``, node/run/overlap.py) it is the resident part plus a second
copy of the weights plus both. Pure functions; only
``free_device_memory`` touches torch.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

__all__ = ["GiB", "PROFILES", "ModelShape", "Workload", "Settings", "Estimate", "estimate", "choose_settings",
           "largest_class", "QWEN25", "free_device_memory", "NoFit"]

GiB = 2 ** 30
PROFILES = {"8gb": 8, "12gb": 12, "16gb": 16, "24gb": 24, "40gb": 40, "80gb": 80}  # named card sizes (GiB)
CONTEXT_BYTES = int(0.6 * GiB)  # CUDA context and allocator slack, outside any tensor
MARGIN = 0.15  # of the budget, kept free: fragmentation and what the formulas leave out
LORA_RANKS = (64, 32, 16, 8)
MICRO_BATCHES = (64, 32, 16, 8, 4, 2, 1)


class NoFit(ValueError):
    """Not even the smallest settings fit the budget."""


@dataclass(frozen=True)
class ModelShape:
    """What the estimate needs of a causal LM, read from its ``config.json``."""

    layers: int
    hidden: int
    intermediate: int
    vocab: int
    q_dim: int  # attention heads × head dim
    kv_dim: int  # key/value heads × head dim
    tied: bool  # input and output embeddings shared
    qkv_bias: bool = False

    @classmethod
    def from_config(cls, c: dict) -> "ModelShape":
        try:
            h, heads = int(c["hidden_size"]), int(c["num_attention_heads"])
            head_dim = int(c.get("head_dim") or h // heads)
            return cls(layers=int(c["num_hidden_layers"]), hidden=h, intermediate=int(c["intermediate_size"]),
                       vocab=int(c["vocab_size"]), q_dim=heads * head_dim,
                       kv_dim=int(c.get("num_key_value_heads") or heads) * head_dim,
                       tied=bool(c.get("tie_word_embeddings", False)),
                       qkv_bias=c.get("model_type") == "qwen2" or bool(c.get("attention_bias", False)))
        except (KeyError, TypeError, ValueError) as e:
            raise ValueError(f"cannot size this model from its config (needs hidden_size, num_hidden_layers, "
                             f"intermediate_size, vocab_size, num_attention_heads): {e}") from None

    @property
    def params(self) -> int:
        h, q, kv, i = self.hidden, self.q_dim, self.kv_dim, self.intermediate
        layer = h * q + 2 * h * kv + q * h + 3 * h * i + 2 * h + ((q + 2 * kv) if self.qkv_bias else 0)
        return self.vocab * h * (1 if self.tied else 2) + self.layers * layer + h

    def lora_params(self, rank: int) -> int:
        """An adapter on every linear layer of the blocks (peft's "all-linear": not lm_head)."""
        h, q, kv, i = self.hidden, self.q_dim, self.kv_dim, self.intermediate
        return rank * self.layers * (7 * h + 2 * q + 2 * kv + 3 * i)


# Qwen2.5's published configs: the size classes a profile names.
QWEN25 = {
    "0.5B": ModelShape(24, 896, 4864, 151936, 896, 128, True, True),
    "1.5B": ModelShape(28, 1536, 8960, 151936, 1536, 256, True, True),
    "3B": ModelShape(36, 2048, 11008, 151936, 2048, 256, True, True),
    "7B": ModelShape(28, 3584, 18944, 152064, 3584, 512, False, True),
    "14B": ModelShape(48, 5120, 13824, 152064, 5120, 1024, False, True),
}


@dataclass(frozen=True)
class Workload:
    """One step's work: ``rows`` completions of up to ``completion_tokens`` after prompts of up to
    ``prompt_tokens``."""

    rows: int
    prompt_tokens: int
    completion_tokens: int


@dataclass(frozen=True)
class Settings:
    dtype: str = "bfloat16"
    lora_rank: int = 0  # 0 = full fine-tuning
    micro_batch: int = 0  # rows a learner pass (0 = all)
    gradient_checkpointing: bool = False
    generation_batch: int = 0  # rows a generate call (0 = all)
    max_completion_length: int = 0  # 0 = the workload's

    def describe(self) -> str:
        train = f"LoRA rank {self.lora_rank}" if self.lora_rank else "full fine-tuning"
        return (f"{self.dtype}, {train}, micro-batch {self.micro_batch or 'all'}, gradient checkpointing "
                f"{'on' if self.gradient_checkpointing else 'off'}, generation batch "
                f"{self.generation_batch or 'all'}, {self.max_completion_length} completion tokens")


@dataclass(frozen=True)
class Estimate:
    weights: int
    trained_state: int
    learner_activations: int
    learner_logits: int
    generation: int
    context: int = CONTEXT_BYTES
    vllm_share: float = 0.0  # of the card, for a vLLM engine (its own weights copy and KV cache)
    learner_recompute: int = 0  # one layer's activations, live again while checkpointing recomputes it
    overlap: bool = False  # train.max_async on this card: a copy of the weights generates while the learner runs

    @property
    def learner(self) -> int:
        return self.learner_activations + self.learner_recompute + self.learner_logits

    @property
    def peak(self) -> int:
        rest = (self.weights + self.learner + self.generation if self.overlap
                else max(self.learner, self.generation))
        return self.context + self.weights + self.trained_state + rest

    def describe(self) -> str:
        g = lambda b: f"{b / GiB:.2f}"  # noqa: E731
        learner = (f"learner {g(self.learner)} [activations {g(self.learner_activations)}, "
                   f"recomputed layer {g(self.learner_recompute)}, logits {g(self.learner_logits)}]")
        both = (f"the generating copy {g(self.weights)} + {learner} + generation {g(self.generation)}" if self.overlap
                else f"max({learner}, generation {g(self.generation)})")
        return (f"peak {g(self.peak)} GiB = context {g(self.context)} + weights {g(self.weights)} + trained state "
                f"{g(self.trained_state)} + {both}")


def _bytes(dtype: str) -> int:
    return 4 if dtype == "float32" else 2


def activation_bytes_per_token_layer(shape: ModelShape, dtype: str, checkpointing: bool) -> int:
    b, h = _bytes(dtype), shape.hidden
    if checkpointing:
        return b * h  # each layer's input; the layer's own activations live only while recomputed
    return b * (2 * h + 4 * shape.q_dim + 3 * shape.kv_dim + 4 * shape.intermediate) + 2 * (4 + b) * h


def estimate(shape: ModelShape, s: Settings, w: Workload) -> Estimate:
    b = _bytes(s.dtype)
    T = s.max_completion_length or w.completion_tokens
    tokens = w.prompt_tokens + T
    m = min(s.micro_batch or w.rows, w.rows)
    weights = shape.params * b
    trained = 16 * shape.lora_params(s.lora_rank) if s.lora_rank else 3 * weights
    per = activation_bytes_per_token_layer(shape, s.dtype, s.gradient_checkpointing)
    # The layers, the final RMSNorm (all positions) and lm_head's input (completion positions).
    acts = m * (tokens * shape.layers * per + tokens * 2 * (4 + b) * shape.hidden + T * b * shape.hidden)
    # With checkpointing, one layer's activations live again while the backward pass recomputes it.
    recompute = m * tokens * activation_bytes_per_token_layer(shape, s.dtype, False) if s.gradient_checkpointing else 0
    logits = m * T * shape.vocab * (b + 8)
    g = min(s.generation_batch or w.rows, w.rows)
    generation = g * tokens * 2 * shape.layers * shape.kv_dim * b + 3 * g * shape.vocab * 4
    return Estimate(weights, trained, acts, logits, generation, learner_recompute=recompute)


def vllm_share(shape: ModelShape, s: Settings, w: Workload, card_bytes: int) -> float:
    """The ``gpu_memory_utilization`` a vLLM engine beside the learner would need: its own copy
    of the weights, the KV cache for a step's rows and ~0.5 GiB of activations and graphs,
    rounded up to 0.05."""
    b = _bytes(s.dtype)
    T = s.max_completion_length or w.completion_tokens
    need = shape.params * b + w.rows * (w.prompt_tokens + T) * 2 * shape.layers * shape.kv_dim * b + GiB // 2
    return min(0.95, math.ceil(20 * need / card_bytes) / 20)


def usable(budget_bytes: int) -> int:
    return int(budget_bytes * (1 - MARGIN))


def _candidates(shape: ModelShape, w: Workload, bf16: bool):
    """Settings from the most capable to the least. Full fine-tuning runs in float32 (AdamW on
    bf16 weights loses every update below bf16's resolution); with bf16 the base is frozen and a
    LoRA adapter trains in float32 (peft keeps adapters in float32). In each: without, then with
    gradient checkpointing, the largest micro-batch first, at least 8 rows a pass before anything
    smaller is tried."""
    micro = [m for m in MICRO_BATCHES if m < w.rows]
    modes = [("float32", 0)] + [("bfloat16" if bf16 else "float32", r) for r in LORA_RANKS]
    big = [m for m in [w.rows] + micro if m >= min(8, w.rows)]
    small = [m for m in micro if m < min(8, w.rows)]
    for dtype, rank in modes:  # at least 8 rows a pass: checkpointing before a smaller pass
        for ckpt in (False, True):
            for m in big:
                yield Settings(dtype, rank, m, ckpt, max_completion_length=w.completion_tokens)
    for dtype, rank in modes:  # then fewer rows a pass: the largest first, without checkpointing first
        for m in small:
            for ckpt in (False, True):
                yield Settings(dtype, rank, m, ckpt, max_completion_length=w.completion_tokens)


def _generation_batch(shape: ModelShape, s: Settings, w: Workload, room: int) -> int:
    """The largest rows a generate call (all, or a power of two) whose KV cache fits ``room``."""
    for g in [w.rows] + [m for m in MICRO_BATCHES if m < w.rows]:
        if estimate(shape, replace(s, generation_batch=g), w).generation <= room:
            return g
    return 1


def choose_settings(shape: ModelShape, budget_bytes: int, w: Workload, *, bf16: bool = True,
                    vllm: bool = False, overlap: bool = False) -> tuple[Settings, Estimate]:
    """The most capable settings whose peak fits ``budget_bytes`` less the margin. If none does
    at the workload's completion length, it is halved (down to 32 tokens); then ``NoFit``.

    ``vllm``: a vLLM engine samples, beside the learner on the same card: it takes its share
    (``vllm_share``) for good, generation costs the learner's process nothing, and the learner
    must fit in the rest. ``overlap``: generation runs beside the learner on this card with a copy
    of the weights (``train.max_async``), so both, and the copy, must fit at once."""
    while True:
        for s in _candidates(shape, w, bf16):
            e = estimate(shape, s, w)
            resident = e.context + e.weights + e.trained_state
            if vllm:
                share = vllm_share(shape, s, w, budget_bytes)
                limit = usable(int(budget_bytes * (1 - share)))
                if resident + e.learner <= limit:
                    return s, replace(e, generation=0, vllm_share=share)
                continue
            limit = usable(budget_bytes)
            beside = e.weights + e.learner if overlap else 0  # what generation shares the card with
            if resident + e.learner + (e.weights if overlap else 0) <= limit:
                s = replace(s, generation_batch=_generation_batch(shape, s, w, max(limit - resident - beside, 0)))
                e = replace(estimate(shape, s, w), overlap=overlap)
                if e.peak <= limit:
                    return s, replace(e, vllm_share=vllm_share(shape, s, w, budget_bytes))
        if w.completion_tokens <= 32:
            smallest = estimate(shape, Settings("bfloat16" if bf16 else "float32", LORA_RANKS[-1], 1, True, 1,
                                                w.completion_tokens), w)
            raise NoFit(f"the model does not fit {budget_bytes / GiB:.1f} GiB even with LoRA rank {LORA_RANKS[-1]}, "
                        f"gradient checkpointing and one row a pass: {smallest.describe()}; use a smaller model")
        w = replace(w, completion_tokens=w.completion_tokens // 2)


def largest_class(budget_bytes: int, w: Workload, *, bf16: bool = True) -> str | None:
    """The largest Qwen2.5 size class that fits the budget at the workload's full length."""
    best = None
    for name, shape in QWEN25.items():
        try:
            s, _ = choose_settings(shape, budget_bytes, w, bf16=bf16)
        except NoFit:
            break
        if s.max_completion_length < w.completion_tokens:
            break
        best = name
    return best


def free_device_memory(device: str) -> tuple[int, int] | None:
    """(free, total) bytes of a CUDA device, or None where there is none."""
    import torch

    if not device.startswith("cuda") or not torch.cuda.is_available():
        return None
    free, total = torch.cuda.mem_get_info(torch.device(device))
    return int(free), int(total)
