"""The supervised term on peers' verified successes (``learner.peer_sft_coef``), pure: the
negative log-likelihood of chosen completions, added to the GRPO loss.

    S = coef / R · Σ_{i ∈ rows} (1 / T_i) Σ_t −log π_θ(y_i,t | x_i, y_i,<t)

``rows`` are the batch rows marked ``TrainSample.supervised`` (node/run/peer_sft.py chooses them:
peers' completions this node verified, for kinds of question it gets all wrong, at most R a step
and ⌈R × swarm.max_sender_share⌉ from one sender), T_i is row i's completion tokens and R
(``peer_sft_rows``) is a constant, not the number of rows present. So each row weighs coef / R
whatever else the step holds: one sender's rows weigh at most its share of the term however few
others send (a mean over the rows present would give a lone sender's one row all of it), and a
row's tokens are averaged, so a longer completion buys no more weight.

No importance ratio and no advantage: the term is imitation on purpose (RAFT's fine-tuning step on
reward-selected samples; docs/algorithm.md section 11), not an estimate of this node's policy
gradient. What bounds it is the coefficient, R and the per-sender share. Its gradient on a token
is bounded whatever the token's probability (∂(−log softmax)/∂logits = p − onehot), and the
step's gradient norm is clipped with the GRPO term's.
"""

from __future__ import annotations

import torch

__all__ = ["row_nll", "supervised_loss"]


def row_nll(logp: torch.Tensor, mask: torch.Tensor, rows: torch.Tensor) -> torch.Tensor:
    """(B,) each chosen row's mean −log π_θ over its completion tokens; 0 on other rows and on a
    row with no token. ``logp`` and ``mask`` are (B, T), ``rows`` (B,) bool."""
    use = (mask > 0) & rows.unsqueeze(-1)
    # torch.where, not a product with the mask: a padded position's log-prob may be anything.
    nll = torch.where(use, -logp, torch.zeros_like(logp)).sum(-1)  # (B,)
    return nll / use.sum(-1).clamp(min=1).to(nll.dtype)


def supervised_loss(logp: torch.Tensor, mask: torch.Tensor, rows: torch.Tensor, coef: float,
                    max_rows: int) -> torch.Tensor:
    """S above: ``coef`` / ``max_rows`` times the sum of the chosen rows' mean token NLL. A sum over
    rows with a constant divisor, so the terms of a batch's micro-batches add up to the batch's."""
    return row_nll(logp, mask, rows).sum() * (coef / max_rows)
