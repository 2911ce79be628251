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
gradient. Its gradient on a token is bounded whatever the token's probability
(∂(−log softmax)/∂logits = p − onehot), and the step's gradient norm is clipped with the GRPO
term's.

Under Adam the coefficient and R bound the term in *loss* space only: Adam divides the gradient by
its running size, so on a step whose only gradient is the term (this node's own groups of the
kind all wrong: no GRPO gradient, exactly the case the term is for) one row at coef 0.01 moved a
tiny model's weights as far as three rows at coef 1 (max |Δw| = the learning rate either way,
tests/policies/test_learner_supervised.py). ``lr_scale`` puts the bound in update space: such a
step's learning rate is multiplied by min(1, coef) × rows / R, so one sender's ⌈R × share⌉ rows
move the weights at most that share of a full step (the update of Adam is linear in its learning
rate for given moments). On a step that also carries GRPO gradient the factor is 1: there coef
weighs the term against the GRPO gradient in the step's direction, and the step's size is the
GRPO step's (its LR factor), not bounded by coef.
"""

from __future__ import annotations

import torch

__all__ = ["lr_scale", "row_nll", "supervised_loss"]


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


def lr_scale(coef: float, rows: int, max_rows: int, grpo_rows: int) -> float:
    """The factor on a step's learning rate from the term: min(1, ``coef``) × ``rows`` / ``max_rows``
    on a step with supervised rows and no row carrying GRPO gradient (``grpo_rows`` = 0), else 1."""
    if rows <= 0 or grpo_rows > 0:
        return 1.0
    return min(1.0, coef) * min(rows, max_rows) / max_rows
