"""A LoRA policy's sampler: the adapter folded into a copy of the base's linear weights.

peft runs every adapted linear layer as the frozen layer plus two small matmuls (x·Aᵀ·Bᵀ·s),
with casts between the base's dtype and the adapter's float32: on a CPU a share of each sampled
token's time (docs/results/bench_real_model.md measures it, "merged" beside "first"). Sampling does not need the adapter apart: this
copy holds W + s·B·A for each adapted layer, shares every other tensor (embeddings, norms: frozen,
never copied), and is folded again, from the frozen W, whenever an adapter tensor changed (an
optimizer step, a resume, a broadcast version: torch counts in-place writes in ``_version``), so
it never drifts from what the learner trains.

The behaviour log-probs it records describe this copy's distribution, which equals the adapter's
up to float32 rounding. The node uses it in float32 only: folded into bfloat16 weights, an update
smaller than half a bfloat16 step of W rounds away entirely (peft adds s·B·A·x to the layer's output
instead, where it survives), so the sampler would lag the learner by the adapter's early steps.
"""

from __future__ import annotations

import logging

import torch

log = logging.getLogger(__name__)

__all__ = ["MergedSampler"]


class MergedSampler:
    def __init__(self, peft_model):
        from transformers import AutoModelForCausalLM

        base = peft_model.get_base_model()
        self._layers = [(name, m) for name, m in base.named_modules()
                        if hasattr(m, "base_layer") and hasattr(m, "get_delta_weight") and m.active_adapters]
        if not self._layers:
            raise ValueError("no LoRA layer to merge")
        state = {}
        adapted = {f"{name}.base_layer.{k}" for name, _ in self._layers for k in ("weight", "bias")}
        for key, tensor in base.state_dict(keep_vars=True).items():
            if "lora_" in key or key in adapted:
                continue
            state[key] = tensor.detach()  # shared with the policy: frozen
        self._weights: dict[str, torch.Tensor] = {}
        for name, layer in self._layers:
            w = layer.base_layer.weight
            self._weights[name] = torch.empty_like(w, requires_grad=False)
            state[f"{name}.weight"] = self._weights[name]
            if getattr(layer.base_layer, "bias", None) is not None:
                state[f"{name}.bias"] = layer.base_layer.bias.detach()
        with torch.device("meta"):
            model = AutoModelForCausalLM.from_config(base.config, dtype=base.dtype)
        model.load_state_dict(state, strict=False, assign=True)
        for name, buf in list(model.named_buffers()):  # non-persistent ones (rotary frequencies)
            if buf.is_meta:
                owner, _, leaf = name.rpartition(".")
                model.get_submodule(owner).register_buffer(leaf, base.get_buffer(name), persistent=False)
        missing = [n for n, p in model.named_parameters() if p.is_meta]
        if missing:
            raise ValueError(f"merged sampler: no tensor for {missing[:3]}")
        model.tie_weights()
        model.requires_grad_(False)
        model.eval()
        self.model = model
        self._adapter = [p for n, p in peft_model.named_parameters() if "lora_" in n]
        self._seen: tuple[int, ...] | None = None
        self.merges = 0

    def _stamp(self) -> tuple[int, ...]:
        return tuple(p._version for p in self._adapter) + tuple(p.data_ptr() for p in self._adapter)

    @torch.no_grad()
    def current(self):
        """The merged model, folded again first if an adapter tensor changed since the last fold."""
        stamp = self._stamp()
        if stamp != self._seen:
            for name, layer in self._layers:
                w = layer.base_layer.weight
                delta = sum(layer.get_delta_weight(a) for a in layer.active_adapters)
                # As peft's merge_and_unload adds it (W += delta), so an exported model is this copy.
                self._weights[name].copy_(w + delta)
            self._seen = stamp
            self.merges += 1
        return self.model
