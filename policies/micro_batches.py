"""Which rows go through the model together: the learner's passes over a batch, and the order
in which generation's calls take their prompts.

A batch whose rows do not all fit in one forward/backward pass (``learner.micro_batch_size``
rows, ``learner.micro_batch_tokens`` padded tokens, or what an out-of-memory error left) is cut
into passes. Rows are taken longest first, so each pass holds rows of about one length and pads
little, and a pass is cut off before its padded size (rows × (longest prompt + longest
completion) of the pass, what the model computes and the logits hold) would pass the token
budget. The first pass holds the longest rows (not always the most tokens: fewer long rows may
fill less of the budget than the many short ones after them). Each pass is then laid out at its own width (``TokenBatch.take``): the padding
the whole batch's longest row would force on every row is not computed.

Generation (``Policy.generate``, the held-out evaluation) takes its prompts longest first too
(``longest_first``), so when its rows are split over several calls each call's prompts are of
about one length and left-pad little; the results go back in the callers' order.

Pure: lengths in, row indices out (tests/policies/test_micro_batches.py checks by hand).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

__all__ = ["Pass", "plan_passes", "longest_first"]


@dataclass(frozen=True)
class Pass:
    """One forward/backward pass: these rows of the batch, laid out ``prompt_len`` +
    ``completion_len`` tokens wide (their longest of each)."""

    rows: tuple[int, ...]
    prompt_len: int
    completion_len: int

    @property
    def tokens(self) -> int:
        """The padded tokens the pass computes."""
        return len(self.rows) * (self.prompt_len + self.completion_len)


def plan_passes(prompt_lens: Sequence[int], completion_lens: Sequence[int], max_rows: int = 0,
                max_tokens: int = 0) -> list[Pass]:
    """The passes over rows of these lengths: at most ``max_rows`` rows (0: no bound) and
    ``max_tokens`` padded tokens (0: no bound) each, at least one row each (a row longer than
    the budget goes alone: the out-of-memory path, policies/oom.py, is what says it cannot fit).

    With neither bound (or bounds the whole batch fits) one pass of every row in its order."""
    n = len(prompt_lens)
    if n != len(completion_lens):
        raise ValueError("one prompt length per completion length")
    if n == 0:
        return []
    whole = Pass(tuple(range(n)), max(prompt_lens), max(completion_lens))
    if (max_rows <= 0 or n <= max_rows) and (max_tokens <= 0 or whole.tokens <= max_tokens):
        return [whole]
    order = longest_first([p + c for p, c in zip(prompt_lens, completion_lens)])
    passes: list[Pass] = []
    rows: list[int] = []
    p = c = 0
    for i in order:
        wide_p, wide_c = max(p, prompt_lens[i]), max(c, completion_lens[i])
        full = (max_rows > 0 and len(rows) >= max_rows) or (
            max_tokens > 0 and (len(rows) + 1) * (wide_p + wide_c) > max_tokens)
        if rows and full:
            passes.append(Pass(tuple(rows), p, c))
            rows, wide_p, wide_c = [], prompt_lens[i], completion_lens[i]
        rows.append(i)
        p, c = wide_p, wide_c
    passes.append(Pass(tuple(rows), p, c))
    return passes


def longest_first(lengths: Sequence[int]) -> list[int]:
    """Indices of ``lengths``, longest first; equal lengths keep their order (a group's rows stay
    together)."""
    return sorted(range(len(lengths)), key=lambda i: (-lengths[i], i))
