"""What generation samples from, and the behaviour log-probs it records: exactly that.

A rollout carries log μ(y_t) for each sampled token, and the learner's importance ratios are only
right if μ is the distribution the token was drawn from, tempered as the learner tempers π_θ.
Two things used to break that on real checkpoints:

* **Memory.** Returning the logits of every step (``output_logits``) keeps B·T·V floats: about
  40 GB for 64 completions × 1024 tokens × a 152k vocabulary. ``BehaviourLogprobs`` is a logits
  processor that, at each step, computes the log-normaliser of the tempered distribution (rows
  in chunks, so its temporaries are small) and, at the next step, the log-prob of the token
  sampled (the last column of ``input_ids`` by then): B floats a step are kept, and the step's
  scores live one step longer than in plain ``generate``.
* **Settings that change what is sampled.** A checkpoint's ``generation_config.json`` may ask for
  a repetition penalty, banned words, a minimum length, forced tokens... Each changes the
  distribution tokens are drawn from, but not π_θ as the learner computes it, so the recorded
  log-probs would describe a different distribution than the one sampled. They are neutralised
  (``sampling_config``), each named in a warning, and generation runs on an explicit config:
  temperature, top-p and top-k only.

Top-p / top-k truncation is *not* reflected in the log-probs (as in TRL): the learner's π_θ and
the recorded μ are both the temperature-scaled full softmax, which keeps the ratio consistent.
The processor runs before temperature, top-k and top-p (transformers applies custom processors
first, warpers last), so it sees the raw logits and applies the temperature itself.
"""

from __future__ import annotations

import logging

import torch

log = logging.getLogger(__name__)

__all__ = ["DISTORTING_SETTINGS", "sampling_config", "BehaviourLogprobs"]

# generation_config fields that change the sampled distribution away from softmax(logits / T)
# (before top-k/top-p), with the value that turns each off.
DISTORTING_SETTINGS = {
    "repetition_penalty": 1.0,
    "encoder_repetition_penalty": 1.0,
    "no_repeat_ngram_size": 0,
    "encoder_no_repeat_ngram_size": 0,
    "bad_words_ids": None,
    "sequence_bias": None,
    "suppress_tokens": None,
    "begin_suppress_tokens": None,
    "forced_bos_token_id": None,
    "forced_eos_token_id": None,
    "min_length": 0,
    "min_new_tokens": None,
    "exponential_decay_length_penalty": None,
    "typical_p": 1.0,
    "epsilon_cutoff": 0.0,
    "eta_cutoff": 0.0,
    "min_p": None,
    "top_h": None,
    "guidance_scale": None,
    "renormalize_logits": False,
    "watermarking_config": None,
    "diversity_penalty": 0.0,
    "num_beams": 1,
    "num_beam_groups": 1,
    "penalty_alpha": None,
    "dola_layers": None,
    "force_words_ids": None,
    "constraints": None,
    "stop_strings": None,  # ends a completion without EOS where the learner expects one
    "prompt_lookup_num_tokens": None,
}


def _is_neutral(name: str, value, neutral) -> bool:
    if value is None or value == neutral:
        return True
    # Empty lists / dicts switch nothing on either.
    return isinstance(value, (list, tuple, dict)) and not value


def sampling_config(model_config, *, eos_token_id: int, pad_token_id: int):
    """A clean ``GenerationConfig`` for sampling (the model's EOS / pad / BOS only), and the
    settings of ``model_config`` (the checkpoint's generation config, may be None) that it drops
    because they would make the recorded log-probs wrong, as "name=value" strings."""
    from transformers import GenerationConfig

    dropped = []
    if model_config is not None:
        for name, neutral in DISTORTING_SETTINGS.items():
            value = getattr(model_config, name, None)
            if not _is_neutral(name, value, neutral):
                dropped.append(f"{name}={value!r}")
    clean = GenerationConfig(eos_token_id=eos_token_id, pad_token_id=pad_token_id,
                             bos_token_id=getattr(model_config, "bos_token_id", None))
    return clean, dropped


class BehaviourLogprobs:
    """A transformers logits processor (duck-typed: ``__call__(input_ids, scores)``) that records
    log softmax(raw logits / temperature) of each sampled token and returns ``scores`` unchanged.

    Call ``finish(sequences)`` after ``generate``: the last step's token is only known then.
    ``logprobs`` is then (B, steps) on the model's device; columns past a row's EOS are whatever
    the padding token got and must be cut by the caller (as the completion's ids are).
    """

    ROW_CHUNK = 8  # rows normalised at once: the temporaries stay (8, V), not (B, V)

    def __init__(self, temperature: float, prompt_len: int):
        if temperature <= 0:
            raise ValueError(f"temperature must be > 0, got {temperature}")
        self.temperature = temperature
        self.prompt_len = prompt_len
        # The step whose token is not known yet: its raw scores (transformers' own tensor, kept one
        # step longer, not copied: its processors are out of place) and log-normaliser (B,).
        self._pending: tuple[torch.Tensor, torch.Tensor] | None = None
        self._cols: list[torch.Tensor] = []  # (B,) per step
        self.logprobs: torch.Tensor | None = None

    def _gather(self, tokens: torch.Tensor) -> None:
        scores, lse = self._pending
        picked = scores.gather(-1, tokens.unsqueeze(-1)).squeeze(-1).float()
        self._cols.append(picked / self.temperature - lse)
        self._pending = None

    def __call__(self, input_ids: torch.Tensor, scores: torch.Tensor) -> torch.Tensor:
        if self._pending is not None:  # the token sampled from the previous step's distribution
            self._gather(input_ids[:, -1])
        # log softmax(z / T)[y] = z_y / T - logsumexp(z / T): only the normaliser now, the token's
        # term next step. No (B, V) result is kept beyond the scores themselves.
        lse = torch.cat([torch.logsumexp(rows.float() / self.temperature, dim=-1)
                         for rows in scores.split(self.ROW_CHUNK)])
        self._pending = (scores, lse)
        return scores

    def finish(self, sequences: torch.Tensor) -> torch.Tensor:
        """The (B, T) log-probs of ``sequences[:, prompt_len:]``, T = its number of columns."""
        if self._pending is not None:
            self._gather(sequences[:, -1])
        T = sequences.shape[1] - self.prompt_len
        if len(self._cols) != T:
            raise RuntimeError(f"recorded {len(self._cols)} steps for {T} generated tokens: generation "
                               "did not call the logits processor once a step")
        dev = sequences.device
        self.logprobs = (torch.stack(self._cols, dim=1) if self._cols
                         else torch.zeros(sequences.shape[0], 0, device=dev))
        self._cols = []
        return self.logprobs
