"""log softmax(z / T)[y] of each target token, without a (rows, vocabulary) float32 tensor.

The learner needs one log-prob per completion token, but ``log_softmax(logits.float() / T)``
keeps the whole (B, T, V) tensor in float32, twice over in the backward pass: with a 49k-token
vocabulary and 16 completions of 128 tokens that is about 400 MB a copy (docs/results/
bench_real_model.md measures the step with and without). ``token_logprobs`` computes the same
values in chunks of rows (the log-normaliser and the target's logit), keeps only the logits (in
their own dtype) and one float a row for the backward pass, and computes the gradient,
(onehot(y) − softmax(z/T))/T per row, chunk by chunk there too.
"""

from __future__ import annotations

import torch

__all__ = ["token_logprobs", "CHUNK_ELEMENTS"]

CHUNK_ELEMENTS = 1 << 23  # rows × vocabulary of a chunk's float32 temporaries: 32 MB


class _TokenLogprobs(torch.autograd.Function):
    @staticmethod
    def forward(ctx, logits: torch.Tensor, targets: torch.Tensor, temperature: float) -> torch.Tensor:
        n, v = logits.shape
        rows = max(1, CHUNK_ELEMENTS // max(1, v))
        out = torch.empty(n, dtype=torch.float32, device=logits.device)
        lse = torch.empty(n, dtype=torch.float32, device=logits.device)
        for s in range(0, n, rows):
            z = logits[s:s + rows].float() / temperature
            lse[s:s + rows] = torch.logsumexp(z, dim=-1)
            out[s:s + rows] = z.gather(-1, targets[s:s + rows, None]).squeeze(-1) - lse[s:s + rows]
        ctx.save_for_backward(logits, targets, lse)
        ctx.temperature, ctx.rows = temperature, rows
        return out

    @staticmethod
    def backward(ctx, grad_out: torch.Tensor):
        logits, targets, lse = ctx.saved_tensors
        t, rows = ctx.temperature, ctx.rows
        grad = torch.empty_like(logits)
        for s in range(0, logits.shape[0], rows):
            g = grad_out[s:s + rows, None].float()
            p = torch.exp(logits[s:s + rows].float() / t - lse[s:s + rows, None])
            gz = (-p * g).scatter_add_(-1, targets[s:s + rows, None], g)
            grad[s:s + rows] = (gz / t).to(grad.dtype)
        return grad, None, None


def token_logprobs(logits: torch.Tensor, targets: torch.Tensor, temperature: float = 1.0) -> torch.Tensor:
    """(..., V) logits and (...) target ids → (...) float32 log softmax(logits / T)[target]."""
    lead = targets.shape
    flat = _TokenLogprobs.apply(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1), float(temperature))
    return flat.reshape(lead)
