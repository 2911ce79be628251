"""Runs inside vLLM's worker process: loads the trainer's new weights into the running engine.

Given to ``vllm.LLM(worker_extension_cls="swarm_node.policies.vllm_worker.WeightSync")``, its methods join
vLLM's worker, so ``llm.collective_rpc("load_weights_file", args=(path,))`` runs them there. The
weights travel as a safetensors file (tensors cannot be pickled across vLLM's processes; a file
on /dev/shm was the fastest route measured on vLLM 0.32). This module imports nothing of the node:
the worker process has only vLLM and torch.
"""

from __future__ import annotations

import time

__all__ = ["WeightSync"]


class WeightSync:
    def load_weights_file(self, path: str) -> float:
        """Load Hugging Face-named tensors (any subset of the model's) in place; returns seconds."""
        import safetensors.torch

        import logging

        t0 = time.perf_counter()
        tensors = safetensors.torch.load_file(path)
        # A LoRA run sends only the adapted layers: vLLM's "weights were not loaded" warning
        # would then fill the log every step.
        logging.getLogger("vllm.model_executor.model_loader.reload.inplace").setLevel(logging.ERROR)
        # reload_weights, not model.load_weights: it restores the weight loaders (CPU backends
        # repack the GEMM weights after loading, leaving the originals empty), maps q/k/v onto
        # qkv_proj and gate/up onto gate_up_proj, and re-runs the post-load processing.
        self.reload_weights(weights_iterator=list(tensors.items()), is_checkpoint_format=True)
        model = self.model_runner.model
        lm_head = getattr(model, "lm_head", None)
        if (lm_head is not None and getattr(getattr(model, "config", None), "tie_word_embeddings", False)
                and getattr(lm_head, "quant_method", None) is not None):
            # A tied lm_head keeps its own processed copy of the embedding: refresh it too.
            lm_head.quant_method.process_weights_after_loading(lm_head)
        return time.perf_counter() - t0
