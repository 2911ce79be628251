"""token_logprobs (policies/token_logprobs.py) gives log_softmax's values and gradients, in chunks."""

from __future__ import annotations

import pytest
import torch

import swarm_node.policies.token_logprobs as tl
from swarm_node.policies.token_logprobs import token_logprobs


def _plain(logits, targets, t):
    return torch.log_softmax(logits.float() / t, dim=-1).gather(-1, targets.unsqueeze(-1)).squeeze(-1)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_values_and_gradients_equal_log_softmax_in_chunks(monkeypatch, dtype):
    monkeypatch.setattr(tl, "CHUNK_ELEMENTS", 3 * 50)  # 3 rows a chunk: several chunks and a short last one
    torch.manual_seed(0)
    base = (torch.randn(2, 7, 50) * 4).to(dtype)
    targets = torch.randint(0, 50, (2, 7))
    weights = torch.randn(2, 7)
    a, b = base.clone().requires_grad_(), base.clone().requires_grad_()
    got, want = token_logprobs(a, targets, 0.7), _plain(b, targets, 0.7)
    assert got.dtype == torch.float32 and got.shape == (2, 7)
    torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5)
    (got * weights).sum().backward()
    (want * weights).sum().backward()
    tol = 1e-6 if dtype == torch.float32 else 1e-2  # the gradient is rounded to the logits' dtype
    torch.testing.assert_close(a.grad.float(), b.grad.float(), atol=tol, rtol=tol)


def test_a_large_logit_stays_finite():
    logits = torch.tensor([[1e4, 0.0, -1e4]], requires_grad=True)
    lp = token_logprobs(logits, torch.tensor([1]))
    lp.sum().backward()
    assert torch.isfinite(lp).all() and torch.isfinite(logits.grad).all()
    assert float(lp) == pytest.approx(-1e4)
