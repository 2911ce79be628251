"""Generation that stops early and is continued later: APRIL's partial rollouts, policy side.

A step hands over rows: a prompt, or a prompt followed by the start of a completion an earlier
step sampled, each with the new tokens it may still sample (its budget: what the earlier part
left of ``max_completion_length``) and the group it belongs to. ``RowStops``, a transformers
stopping criterion, ends each row at its EOS or its budget and, once ``need`` groups have every
row ended, ends all rows still going: those come back ``halted``, with the tokens and behaviour
log-probs sampled so far, and a later call continues them (node/run/april.py keeps them).

The continuation is exact: the model is fed the earlier tokens as context, so what it samples next
is drawn from π(· | prompt, earlier tokens) under the weights of this call, and the log-prob
recorded for each new token is that distribution's (policies/sampling.py). Earlier tokens keep the
log-probs of the weights that sampled them; the learner's per-token ratios need nothing else.
"""

from __future__ import annotations

import collections
from dataclasses import dataclass

import torch

from swarm_node.policies.oom import fit_by_halving
from swarm_node.policies.policy import Policy, SamplingParams

__all__ = ["RowRequest", "RowResult", "RowStops", "generate_partial", "EOS", "BUDGET", "HALTED"]

EOS, BUDGET, HALTED = "eos", "budget", "halted"  # how a row ended; halted = unfinished, continue it


@dataclass(frozen=True)
class RowRequest:
    ids: tuple[int, ...]  # what the model continues: the prompt, and the completion so far
    budget: int  # new tokens it may still sample (>= 1)
    group: int  # a group is finished once all its rows are


@dataclass(frozen=True)
class RowResult:
    ids: tuple[int, ...]  # the new tokens, EOS included when sampled
    logprobs: tuple[float, ...]  # their behaviour log-probs
    ended: str  # EOS, BUDGET or HALTED


class RowStops:
    """Ends rows at EOS or their budget, and all of them once ``need`` groups are finished.

    ``left`` counts, per group, its rows still going across the whole request (a group may span
    generate calls); ``finished`` the groups already finished before this call. Both are this
    object's copies: the caller keeps them only when the call succeeds (an out-of-memory attempt
    is redone whole). ``need`` None: never halts (every row runs to its EOS or budget).
    """

    def __init__(self, rows: list[RowRequest], prompt_len: int, eos_id: int, left: dict[int, int],
                 finished: int, need: int | None):
        self.budgets = [r.budget for r in rows]
        self.groups = [r.group for r in rows]
        self.prompt_len = prompt_len
        self.eos_id = eos_id
        self.left = dict(left)
        self.finished = finished
        self.need = need
        self.end: list[tuple[int, str] | None] = [None] * len(rows)  # (new tokens, how it ended)
        self.halted = False

    def _ended(self, i: int, n: int, how: str) -> None:
        self.end[i] = (n, how)
        if how == HALTED:
            return
        g = self.groups[i]
        self.left[g] -= 1
        if self.left[g] == 0:
            self.finished += 1

    def __call__(self, input_ids: torch.Tensor, scores=None, **kwargs) -> torch.Tensor:
        t = input_ids.shape[1] - self.prompt_len  # new tokens so far, the last one included
        last = input_ids[:, -1].tolist()
        for i, tok in enumerate(last):
            if self.end[i] is None:
                if tok == self.eos_id:
                    self._ended(i, t, EOS)
                elif t >= self.budgets[i]:
                    self._ended(i, t, BUDGET)
        if self.need is not None and self.finished >= self.need:
            for i, e in enumerate(self.end):
                if e is None:
                    self._ended(i, t, HALTED)
                    self.halted = True
        return torch.tensor([e is not None for e in self.end], dtype=torch.bool, device=input_ids.device)


def _call(policy: Policy, rows: list[RowRequest], params: SamplingParams, left: dict[int, int],
          finished: int, need: int | None) -> tuple[list[RowResult], RowStops]:
    """One generate call over ``rows``."""
    prompt_len = max(len(r.ids) for r in rows)  # TokenBatch's left padding
    stops = RowStops(rows, prompt_len, policy.eos_token_id, left, finished, need)
    new, logp = policy.sample_tokens([r.ids for r in rows], max(r.budget for r in rows), params, stops)
    out = []
    for i, end in enumerate(stops.end):
        n, how = end if end is not None else (new.shape[1], BUDGET)  # generate stopped at the longest budget
        out.append(RowResult(tuple(int(x) for x in new[i, :n]), tuple(float(v) for v in logp[i, :n]), how))
    return out, stops


def generate_partial(policy: Policy, rows: list[RowRequest], params: SamplingParams,
                     need: int | None) -> tuple[list[RowResult], bool]:
    """Sample each row until it ends or ``need`` groups are finished; returns one result per row
    (rows a halted step never reached come back halted with no tokens) and whether it halted.

    Rows go to the model ``policy.generation_batch_size`` at a time, halved on out-of-memory as
    ``Policy.generate`` does; a group's rows may span calls."""
    if any(r.budget < 1 for r in rows):
        raise ValueError("every row needs a budget of at least one token")
    left = dict(collections.Counter(r.group for r in rows))
    finished = 0
    results: list[RowResult] = []
    was_training = policy.model.training
    with policy.weights_lock:
        policy.model.eval()
        try:
            with torch.no_grad():
                while len(results) < len(rows) and (need is None or finished < need):
                    todo = rows[len(results):]
                    size = len(todo) if policy.generation_batch_size <= 0 else min(policy.generation_batch_size, len(todo))
                    (done, stops), _ = fit_by_halving(
                        lambda n: _call(policy, todo[:n], params, left, finished, need), size,
                        what="generation", device=policy.device, on_halve=policy.generation_halved,
                        hint="lower generation.prompts_per_step, generation.over_provision or "
                             "generation.max_completion_length, or use a smaller model")
                    left, finished = stops.left, stops.finished
                    results += done
        finally:
            policy.model.train(was_training)
    halted = any(r.ended == HALTED for r in results) or len(results) < len(rows)
    results += [RowResult((), (), HALTED)] * (len(rows) - len(results))
    return results, halted
