"""A node's policy: any Hugging Face causal LM plus its tokenizer.

``Policy.load`` takes a hub id or a local path (``AutoModelForCausalLM`` + ``AutoTokenizer``),
optionally wrapping the model in a LoRA adapter (``peft``). ``generate`` samples G completions per
prompt and returns, for each, the token ids, the text and the behaviour log-prob of every sampled
token; ``completion_logprobs`` recomputes those log-probs in one batched forward pass for the
learner. Both use the same temperature-scaled distribution, so for an unchanged policy the two
agree (to ~1e-6 on CPU float32; tests/policies/test_policy_generation.py checks 1e-4).

What generation samples from and the log-probs it records (never the full logits: one (B, V)
tensor at a time) are policies/sampling.py's: a checkpoint's settings that would change the
sampled distribution (a repetition penalty, banned words...) are switched off, with a warning.
"""

from __future__ import annotations

import copy
import hashlib
import inspect
import json
import logging
import threading
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import torch

from swarm_node.policies.errors import PolicyError
from swarm_node.policies.halt import GenerationStopped, HaltWhen
from swarm_node.policies.micro_batches import longest_first
from swarm_node.policies.oom import fit_by_halving
from swarm_node.policies.prompt_format import RAW
from swarm_node.policies.sampling import BehaviourLogprobs, sampling_config
from swarm_node.policies.token_batch import TokenBatch
from swarm_node.policies.token_logprobs import token_logprobs

log = logging.getLogger(__name__)

__all__ = ["Completion", "SamplingParams", "TokenBatch", "Policy", "tokenizer_fingerprint"]


@dataclass(frozen=True)
class SamplingParams:
    max_new_tokens: int = 16
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = 0  # 0 = off


@dataclass(frozen=True)
class Completion:
    prompt_ids: tuple[int, ...]
    completion_ids: tuple[int, ...]  # up to and including EOS when it was sampled
    text: str  # decoded completion, special tokens skipped
    logprobs: tuple[float, ...]  # behaviour log-prob of each completion token
    truncated: bool  # hit max_new_tokens without sampling EOS

    @property
    def seq_logprob(self) -> float:
        return float(sum(self.logprobs))


def _dropout_off(config) -> list[str]:
    """Set every dropout probability of a model config to 0, before the model is built (layers
    copy them at init); returns the settings that were not 0. Generation samples without dropout,
    and the learner must compute log π_θ the same way: most layers drop out by their own
    ``training`` flag, which gradient checkpointing has to set (``Policy.learning_mode``)."""
    off = []
    for key, value in config.to_dict().items():
        if ("dropout" in key or key.endswith("pdrop")) and isinstance(value, float) and value > 0:
            setattr(config, key, 0.0)
            off.append(f"{key} {value:g}")
    return off


def _vocabulary_rows(model) -> int | None:
    """How many token ids the model's input embeddings have (None: it does not say)."""
    try:
        return int(model.get_input_embeddings().num_embeddings)
    except (AttributeError, NotImplementedError, TypeError):
        return None


def tokenizer_fingerprint(tokenizer) -> str:
    """sha256 over the vocabulary and special tokens: equal fingerprints ⇒ token ids transfer."""
    vocab = sorted(tokenizer.get_vocab().items())
    special = sorted(str(t) for t in tokenizer.all_special_tokens)
    blob = json.dumps([vocab, special], ensure_ascii=False).encode()
    return hashlib.sha256(blob).hexdigest()[:16]


class Policy:
    """Owns a causal LM and its tokenizer; generation and log-prob recompute share one scaling."""

    def __init__(self, model, tokenizer, name: str):
        self.model = model
        self.tokenizer = tokenizer
        self.name = name
        if tokenizer.eos_token_id is None:
            raise PolicyError(f"tokenizer of {name!r} has no EOS token: completions could never end; "
                              f"set tokenizer.eos_token before using it as a policy")
        rows = _vocabulary_rows(model)
        if rows is not None and tokenizer.eos_token_id >= rows:
            # transformers gives a tokenizer with no EOS a new one ("<|endoftext|>") past the
            # model's embeddings: sampling could never emit it and the first lookup would fail.
            raise PolicyError(f"tokenizer of {name!r} has no EOS token of the model's: its EOS "
                              f"{tokenizer.eos_token!r} (id {tokenizer.eos_token_id}) is past the model's "
                              f"{rows} embedding rows; set tokenizer.eos_token to a token the model ends with")
        if tokenizer.pad_token_id is None:
            tokenizer.pad_token = tokenizer.eos_token
        # TokenBatch pads by hand; this is for callers that batch-encode prompts for generation.
        tokenizer.padding_side = "left"
        self.tokenizer_fingerprint = tokenizer_fingerprint(tokenizer)
        self.prompt_format = RAW  # how a question becomes a prompt (policies/prompt_format.py)
        cfg = model.config.to_dict() if hasattr(model.config, "to_dict") else {}
        cfg_blob = json.dumps({k: cfg[k] for k in sorted(cfg) if not k.startswith("_")},
                              sort_keys=True, default=str)
        self.model_fingerprint = hashlib.sha256(cfg_blob.encode()).hexdigest()[:16]
        # Generation samples from softmax(logits / T) with top-k / top-p only: a checkpoint's
        # repetition penalty (say) would change what is sampled but not the log-probs recorded.
        gen, dropped = sampling_config(getattr(model, "generation_config", None),
                                       eos_token_id=int(tokenizer.eos_token_id),
                                       pad_token_id=int(tokenizer.pad_token_id))
        if dropped:
            log.warning("%s: generation settings that would make the behaviour log-probs wrong are "
                        "switched off: %s (policies/sampling.py)", name, ", ".join(dropped))
        self.neutralised_settings = dropped
        model.generation_config = gen  # nothing of the checkpoint's can be merged back in by generate
        # Completions sampled per ``model.generate`` call (0 = all at once); halved for good when
        # one runs out of memory (policies/oom.py), each halving counted.
        self.generation_batch_size = 0
        self.generation_oom_halvings = 0
        self._frozen_fp: str | None = None
        # Held by generate for a whole call and by whoever swaps the weights (policies/weight_state.py,
        # a follower applying a broadcast version): no completion mixes two versions' weights.
        self.weights_lock = threading.RLock()
        self.halt: Callable[[], bool] | None = None  # true: a sampling call ends at the next token (policies/halt.py)
        base = model.get_base_model() if hasattr(model, "get_base_model") else model  # under a LoRA wrapper
        self._keeps_logits = "logits_to_keep" in inspect.signature(base.forward).parameters
        self.merged = None  # a MergedSampler when sampling runs on the adapter folded in (merge_for_sampling)

    def merge_for_sampling(self) -> None:
        """Sample from a copy with the LoRA adapter folded into the base's weights
        (policies/merged_sampler.py): on a CPU, about half of a token's time is the adapter's."""
        from swarm_node.policies.merged_sampler import MergedSampler

        if self.adapter_only and self.merged is None:
            self.merged = MergedSampler(self.model)

    def sampling_model(self):
        """The model that samples: the policy's own, or its merged copy (up to date with the adapter)."""
        return self.model if self.merged is None else self.merged.current()

    @classmethod
    def load(cls, name_or_path: str | Path, *, dtype: str = "float32", device: str = "cpu",
             lora_rank: int = 0, lora_alpha: int = 16, seed: int | None = None,
             gradient_checkpointing: bool = False) -> "Policy":
        """Load from a hub id or local directory; ``lora_rank > 0`` trains a LoRA adapter only;
        ``gradient_checkpointing`` recomputes each layer's activations in the backward pass
        instead of keeping them (about a third more compute for the learner, a fraction of its
        activation memory)."""
        from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

        torch_dtype = getattr(torch, dtype, None)
        if not isinstance(torch_dtype, torch.dtype):
            raise PolicyError(f"unknown dtype {dtype!r}; use float32, bfloat16 or float16")
        name = str(name_or_path)
        local = Path(name).expanduser()
        if not local.exists() and (isinstance(name_or_path, Path) or name.startswith(("/", ".", "~"))
                                   or name.count("/") > 1):
            # Clearly a path, not a hub id: say so instead of the hub's "Repo id must be..." error.
            raise PolicyError(f"cannot load model {name!r}: no such directory (expected a local "
                              f"Hugging Face checkpoint directory or a hub id like 'org/name')")
        if local.is_dir():
            name = str(local)
        try:
            tokenizer = AutoTokenizer.from_pretrained(name)
            config = AutoConfig.from_pretrained(name)
            off = _dropout_off(config)
            model = AutoModelForCausalLM.from_pretrained(name, dtype=torch_dtype, config=config)
        except (OSError, ValueError) as e:  # missing files, bad repo id, no loadable tokenizer
            raise PolicyError(f"cannot load model {name_or_path!r}: {e}") from e
        if off:
            log.info("dropout is off (%s): the learner's log-probs must be those generation recorded",
                     ", ".join(off))
        model.to(device)
        if gradient_checkpointing:
            if not getattr(model, "supports_gradient_checkpointing", False):
                raise PolicyError(f"{name_or_path!r} ({type(model).__name__}) does not support gradient "
                                  f"checkpointing: set model.gradient_checkpointing = false")
            # Not re-entrant: works with frozen inputs (LoRA) without enable_input_require_grads.
            if hasattr(model, "activation_checkpointing_enable"):  # its name from transformers 5.2x on
                model.activation_checkpointing_enable(activation_checkpointing_kwargs={"use_reentrant": False})
            else:
                model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
        if lora_rank > 0:
            try:
                from peft import LoraConfig, get_peft_model
            except ImportError as e:
                raise PolicyError("LoRA needs peft: pip install 'swarm-node[lora]'") from e
            if seed is not None:
                torch.manual_seed(seed)  # the adapter's init is random: make it reproducible
            # peft (0.21.2, the newest) reads transformers' deprecated is_gradient_checkpointing in
            # PeftModel.__init__: a FutureWarning at every LoRA start that no call of ours avoids.
            warnings.filterwarnings("ignore", "`is_gradient_checkpointing` is deprecated", FutureWarning,
                                    r"transformers\.modeling_utils")
            model = get_peft_model(model, LoraConfig(r=lora_rank, lora_alpha=lora_alpha,
                                                     target_modules="all-linear"))
        total = sum(p.numel() for p in model.parameters())
        trained = sum(p.numel() for p in model.parameters() if p.requires_grad)
        if lora_rank > 0:
            log.info("LoRA is on (rank %d, alpha %d, every linear layer): %s of %s parameters train "
                     "(%.2f%%)", lora_rank, lora_alpha, f"{trained:,}", f"{total:,}", 100 * trained / max(total, 1))
        else:
            log.info("full fine-tuning: all %s parameters train", f"{trained:,}")
        return cls(model, tokenizer, str(name_or_path))

    @property
    def device(self) -> torch.device:
        return next(self.model.parameters()).device

    @property
    def eos_token_id(self) -> int:
        return int(self.tokenizer.eos_token_id)

    @property
    def rollout_fingerprint(self) -> str:
        """What this node's rollouts say of their tokens: the tokenizer's fingerprint, with the
        prompt format folded in (a peer that prompts otherwise is another behaviour policy)."""
        return self.prompt_format.fingerprint(self.tokenizer_fingerprint)

    def prompt_of(self, task) -> str:
        """The prompt text of a task (``rewards.Task``) in this policy's prompt format."""
        return self.prompt_format.text(self.tokenizer, task.question)

    def encode_prompts(self, prompts: list[str]) -> list[tuple[int, ...]]:
        enc = self.tokenizer(prompts, add_special_tokens=False)["input_ids"]
        return [tuple(ids) for ids in enc]

    def encode_completion(self, text: str) -> tuple[int, ...]:
        """Tokenize a (peer's) completion text for this policy, EOS appended as sampling would."""
        # split_special_tokens: a peer's text spelling "<eos>" or a chat-template marker is text,
        # never the special token itself.
        ids = self.tokenizer(text, add_special_tokens=False, split_special_tokens=True)["input_ids"]
        return tuple(ids) + (self.eos_token_id,)

    @torch.no_grad()
    def generate(self, prompts: list[str], num_generations: int,
                 params: SamplingParams = SamplingParams()) -> list[list[Completion]]:
        """Sample ``num_generations`` completions for each prompt: result[i][g].

        Rows go to the model ``generation_batch_size`` at a time (all at once when 0); a call
        that runs out of memory is retried at half the rows, and the smaller size is kept."""
        if num_generations < 1:
            raise ValueError("num_generations must be >= 1")
        prompt_ids = self.encode_prompts(prompts)
        rows = [p for p in prompt_ids for _ in range(num_generations)]
        was_training = self.model.training
        with self.weights_lock:
            self.model.eval()
            try:
                flat = self._generate_rows(rows, params, self.generation_halved)
            finally:
                self.model.train(was_training)
        return [flat[i:i + num_generations] for i in range(0, len(flat), num_generations)]

    def generation_halved(self, old: int, new: int) -> None:
        """Out of memory at ``old`` rows a call: ``new`` from now on, counted (policies/oom.py)."""
        self.generation_batch_size = new
        self.generation_oom_halvings += 1

    def _generate_rows(self, rows, params: SamplingParams, halved) -> list[Completion]:
        """Completions of ``rows`` in their order; when they take several calls, each call's prompts
        are of about one length (longest first: policies/micro_batches.py), so it left-pads little.
        One call keeps the rows' order (which row draws which random numbers: a run's samples
        stay what they were)."""
        split = 0 < self.generation_batch_size < len(rows)
        order = longest_first([len(r) for r in rows]) if split else list(range(len(rows)))
        flat: list[Completion] = []
        while len(flat) < len(rows):
            todo = [rows[i] for i in order[len(flat):]]
            size = len(todo) if self.generation_batch_size <= 0 else min(self.generation_batch_size, len(todo))
            done, _ = fit_by_halving(lambda n: self._sample(todo[:n], params), size, what="generation",
                                     hint="lower generation.prompts_per_step, generation.num_generations or "
                                          "generation.max_completion_length, or use a smaller model",
                                     device=self.device, on_halve=halved)
            flat += done
        out: list[Completion] = [None] * len(rows)  # type: ignore[list-item]
        for k, i in enumerate(order):
            out[i] = flat[k]
        return out

    def _sample(self, rows: list[tuple[int, ...]], params: SamplingParams) -> list[Completion]:
        """One ``model.generate`` call over these prompt rows (eval mode, no grad)."""
        new, tok_logp = self.sample_tokens(rows, params.max_new_tokens, params)
        is_eos = new == self.eos_token_id
        out = []
        for i, p in enumerate(rows):
            eos_pos = is_eos[i].nonzero()
            n = int(eos_pos[0]) + 1 if eos_pos.numel() else new.shape[1]
            ids = tuple(int(t) for t in new[i, :n])
            out.append(Completion(
                prompt_ids=p,
                completion_ids=ids,
                text=self.tokenizer.decode(ids, skip_special_tokens=True),
                logprobs=tuple(float(v) for v in tok_logp[i, :n]),
                truncated=not eos_pos.numel(),
            ))
        return out

    def sample_tokens(self, rows: list[tuple[int, ...]], max_new_tokens: int, params: SamplingParams,
                      stopping=None) -> tuple[torch.Tensor, torch.Tensor]:
        """One ``model.generate`` call continuing each row of token ids (a prompt, or a prompt and
        the start of a completion): the new tokens and their behaviour log-probs, both (B, T) on
        the host. Columns past a row's end (EOS, or where ``stopping``, a transformers stopping
        criterion, ended it) are padding the caller cuts. The caller holds ``weights_lock`` and
        has the model in eval mode (``generate`` does both). Raises ``GenerationStopped`` when
        ``halt`` ended the call (policies/halt.py)."""
        from transformers import LogitsProcessorList, StoppingCriteriaList

        halt = HaltWhen(self.halt) if self.halt is not None else None
        pad = int(self.tokenizer.pad_token_id)
        batch = TokenBatch.build(rows, [()] * len(rows), pad)
        P = batch.prompt_len
        recorder = BehaviourLogprobs(params.temperature, P)
        # This call's settings on a copy of the clean config (sampling_config): one object, so
        # nothing of a checkpoint's own config can come back in.
        gen = copy.deepcopy(self.model.generation_config)
        gen.update(do_sample=True, temperature=params.temperature, top_p=params.top_p, top_k=params.top_k,
                   max_new_tokens=max_new_tokens, eos_token_id=self.eos_token_id, pad_token_id=pad)
        sequences = self.sampling_model().generate(
            input_ids=batch.input_ids[:, :P].to(self.device),
            attention_mask=batch.attention_mask[:, :P].to(self.device),
            generation_config=gen,
            logits_processor=LogitsProcessorList([recorder]),
            stopping_criteria=StoppingCriteriaList([c for c in (stopping, halt) if c is not None]),
        )
        if halt is not None and halt.fired:
            raise GenerationStopped("generation stopped by request (Policy.halt)")
        # Only (B, T) values: the sampled tokens' log-probs, gathered step by step.
        return sequences[:, P:].cpu(), recorder.finish(sequences).cpu()

    def completion_logprobs(self, batch: TokenBatch, temperature: float = 1.0) -> torch.Tensor:
        """log π(y_t | x, y_<t) for every completion column, (B, T); 0 on padding.

        Runs with grad when the caller is training. Position ids are derived from the attention
        mask so left padding does not shift positions (``generate`` does the same).
        """
        ids = batch.input_ids.to(self.device)
        att = batch.attention_mask.to(self.device)
        pos = (att.cumsum(-1) - 1).clamp(min=0)
        P = batch.prompt_len
        T = ids.shape[1] - P
        # Logits of the completion columns only: a (B, P + T, V) tensor for the prompts too would
        # be most of the learner's memory on a 152k vocabulary.
        keep = {"logits_to_keep": T + 1} if self._keeps_logits else {}
        logits = self.model(input_ids=ids, attention_mask=att, position_ids=pos, **keep).logits
        # logits at column j predict token j+1: completion tokens P..P+T-1 come from P-1..P+T-2.
        # In float32 without a float32 (B, T, V) copy (policies/token_logprobs.py).
        logp = token_logprobs(logits[:, -(T + 1):-1], ids[:, P:], temperature)  # (B, T)
        return logp * batch.completion_mask.to(logp.device)

    def learning_mode(self) -> None:
        """Eval mode for the learner's passes (no dropout: the behaviour log-probs were recorded
        without it), except that layers with gradient checkpointing are marked training: it is
        only active in a training layer, and their sub-modules (dropout) stay in eval mode."""
        from transformers.modeling_layers import GradientCheckpointingLayer

        self.model.eval()
        for m in self.model.modules():
            if isinstance(m, GradientCheckpointingLayer) and m.gradient_checkpointing:
                m.training = True  # this module only: not .train(), which would recurse

    @property
    def adapter_only(self) -> bool:
        """Whether only a LoRA adapter trains (the base weights are frozen, re-read at load)."""
        return hasattr(self.model, "peft_config")

    def trained_state(self) -> dict[str, torch.Tensor]:
        """The tensors a checkpoint must hold to restore this policy: with LoRA the adapter only
        (megabytes; the frozen base comes from ``model.name`` again), else the whole model."""
        if self.adapter_only:
            return {n: p.detach() for n, p in self.model.named_parameters() if p.requires_grad}
        return self.model.state_dict()

    def load_trained_state(self, state: dict[str, torch.Tensor]) -> None:
        """Put ``trained_state()``'s tensors back; ValueError unless the keys and shapes are
        exactly this policy's (another model, or another LoRA rank)."""
        want = self.trained_state()
        if self.adapter_only and set(state) == set(self.model.state_dict()):
            want = self.model.state_dict()  # a LoRA checkpoint from before adapter-only ones: all of it
        if set(state) != set(want) or any(tuple(state[k].shape) != tuple(want[k].shape) for k in want):
            raise ValueError("the tensors are not this policy's")
        self.model.load_state_dict(state, strict=len(want) == len(self.model.state_dict()))

    def frozen_fingerprint(self) -> str:
        """A fingerprint of the frozen weights (a LoRA adapter's base): names, shapes and up to
        4096 evenly spaced values of each tensor, enough to tell two checkpoints apart without
        hashing gigabytes. Computed once: frozen weights do not change."""
        if self._frozen_fp is None:
            h = hashlib.sha256()
            for name, p in self.model.named_parameters():
                if p.requires_grad:
                    continue
                flat = p.detach().reshape(-1)
                sample = flat[::max(1, flat.numel() // 4096)].float().cpu()
                h.update(f"{name}:{tuple(p.shape)}:{p.dtype}".encode())
                h.update(sample.numpy().tobytes())
            self._frozen_fp = h.hexdigest()[:16]
        return self._frozen_fp

    def save(self, path: str | Path) -> None:
        """Write a Hugging Face checkpoint (safetensors) that ``Policy.load`` reads back."""
        model = self.model
        if hasattr(model, "merge_and_unload"):
            # merge_and_unload rewrites the model in place (adapters folded into the base weights
            # and removed): merge a copy so the live policy stays a trainable peft model.
            model = copy.deepcopy(model).merge_and_unload()
        model.save_pretrained(str(path), safe_serialization=True)
        self.tokenizer.save_pretrained(str(path))
