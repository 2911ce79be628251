"""The learner's and the sampler's batch layout: prompt and completion rows for one forward pass.

Every completion starts at the same column, so a batch's completion log-probs line up row by row
(``Policy.completion_logprobs``) and a micro-batch of rows lines up with the whole batch's.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import torch

__all__ = ["TokenBatch"]


@dataclass
class TokenBatch:
    """Prompt + completion rows laid out for one forward pass.

    Row i is ``[pad … pad, prompt, completion, pad … pad]``: prompts left-padded to P tokens so
    every completion starts at column P, completions right-padded to T tokens.
    """

    input_ids: torch.Tensor  # (B, P + T)
    attention_mask: torch.Tensor  # (B, P + T)
    completion_mask: torch.Tensor  # (B, T) float
    prompt_len: int  # P

    @classmethod
    def build(cls, prompts: list[tuple[int, ...]], completions: list[tuple[int, ...]],
              pad_id: int) -> "TokenBatch":
        if len(prompts) != len(completions) or not prompts:
            raise ValueError("need one prompt per completion and at least one row")
        P = max(len(p) for p in prompts)
        T = max(1, max(len(c) for c in completions))
        B = len(prompts)
        # Laid out on the host (one transfer later), whatever the default device is.
        ids = torch.full((B, P + T), pad_id, dtype=torch.long, device="cpu")
        att = torch.zeros((B, P + T), dtype=torch.long, device="cpu")
        cmask = torch.zeros((B, T), dtype=torch.float32, device="cpu")
        for i, (p, c) in enumerate(zip(prompts, completions)):
            ids[i, P - len(p):P] = torch.tensor(p, dtype=torch.long, device="cpu")
            att[i, P - len(p):P] = 1
            if c:
                ids[i, P:P + len(c)] = torch.tensor(c, dtype=torch.long, device="cpu")
                att[i, P:P + len(c)] = 1
                cmask[i, :len(c)] = 1.0
        return cls(ids, att, cmask, P)

    def rows(self, sl: slice) -> "TokenBatch":
        """These rows only (a micro-batch), same columns: their log-probs line up with the batch's."""
        return TokenBatch(self.input_ids[sl], self.attention_mask[sl], self.completion_mask[sl], self.prompt_len)

    def lengths(self) -> tuple[list[int], list[int]]:
        """Each row's prompt and completion length, in tokens (read on the host)."""
        att = self.attention_mask.cpu()
        return att[:, :self.prompt_len].sum(-1).tolist(), att[:, self.prompt_len:].sum(-1).tolist()

    def take(self, rows: Sequence[int], prompt_len: int, completion_len: int) -> "TokenBatch":
        """These rows at their own width (a pass, policies/micro_batches.py): the last
        ``prompt_len`` prompt columns and the first ``completion_len`` completion columns, which
        must hold all of these rows' tokens. Row j's log-probs are the batch's row ``rows[j]``'s
        first ``completion_len`` columns (positions come from the attention mask, so dropping
        left padding moves nothing)."""
        P, T = self.prompt_len, self.completion_mask.shape[1]
        t = max(1, completion_len)
        if not 0 < prompt_len <= P or t > T:
            raise ValueError(f"a pass of {prompt_len} + {t} columns does not fit a batch of {P} + {T}")
        idx = torch.as_tensor(rows, dtype=torch.long, device=self.input_ids.device)
        cols = slice(P - prompt_len, P + t)
        return TokenBatch(self.input_ids[idx][:, cols], self.attention_mask[idx][:, cols],
                          self.completion_mask[idx.to(self.completion_mask.device)][:, :t], prompt_len)

    def __len__(self) -> int:
        return int(self.input_ids.shape[0])
