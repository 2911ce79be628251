"""Tests of policies.partial_generation: rows that end at EOS, at their budget, or when enough
groups have finished; continuing a halted row is exact; and the per-token weights of a completion
whose tokens two policy versions sampled, by hand."""

from __future__ import annotations

import math
import weakref

import pytest
import torch

from swarm_node.policies.offpolicy import sequence_log_weights, token_log_ratios
from swarm_node.policies.partial_generation import BUDGET, EOS, HALTED, RowRequest, RowStops, generate_partial
from swarm_node.policies.policy import Policy, SamplingParams, TokenBatch

pytestmark = pytest.mark.usefixtures("one_torch_thread")  # tests/conftest.py

EOS_ID = 2


_FED: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # what each RowStops was fed


def _call(stops: RowStops, columns: list[list[int]]) -> list[bool]:
    """Feed ``stops`` more new tokens, column by column, after what it was fed before (a prompt
    of 3 tokens first); the mask of the last call."""
    ids = _FED.get(stops, torch.ones(len(columns[0]), 3, dtype=torch.long))
    done = None
    for col in columns:
        ids = torch.cat([ids, torch.tensor(col).unsqueeze(1)], dim=1)
        done = stops(ids, None).tolist()
    _FED[stops] = ids
    return done


def test_rows_end_at_eos_or_budget_and_a_group_finishes_with_its_last_row():
    rows = [RowRequest((1,), 5, 0), RowRequest((1,), 2, 0), RowRequest((1,), 5, 1)]
    stops = RowStops(rows, 3, EOS_ID, {0: 2, 1: 1}, finished=0, need=None)
    assert _call(stops, [[7, 7, 7]]) == [False, False, False]
    assert _call(stops, [[7, 7, EOS_ID]]) == [False, True, True]  # row 1 at its budget, row 2 at EOS
    assert stops.end == [None, (2, BUDGET), (2, EOS)]
    assert stops.finished == 1 and stops.left == {0: 1, 1: 0}  # group 1 done; group 0 waits for row 0
    # Padding after a row's end (EOS is the pad here) changes nothing of what was recorded.
    assert _call(stops, [[EOS_ID, EOS_ID, EOS_ID]]) == [True, True, True]
    assert stops.end == [(3, EOS), (2, BUDGET), (2, EOS)] and stops.finished == 2 and not stops.halted


def test_enough_finished_groups_halt_every_row_still_going():
    rows = [RowRequest((1,), 9, 0), RowRequest((1,), 9, 1), RowRequest((1,), 9, 1), RowRequest((1,), 9, 2)]
    stops = RowStops(rows, 3, EOS_ID, {0: 1, 1: 2, 2: 1}, finished=0, need=2)
    _call(stops, [[EOS_ID, 7, 7, 7]])  # group 0 finished: 1 of 2
    assert not stops.halted
    done = _call(stops, [[EOS_ID, 7, EOS_ID, EOS_ID]])  # group 2 finished: 2 of 2; group 1 half done
    assert done == [True, True, True, True] and stops.halted
    assert stops.end == [(1, EOS), (2, HALTED), (2, EOS), (2, EOS)]
    assert stops.left[1] == 1  # the halted row is still going: its group is not finished


def test_groups_finished_before_a_call_count_toward_its_need():
    rows = [RowRequest((1,), 9, 4)]
    stops = RowStops(rows, 3, EOS_ID, {4: 1}, finished=1, need=1)
    assert _call(stops, [[7]]) == [True] and stops.end == [(1, HALTED)]


@pytest.fixture(scope="module")
def policy(tiny_model_dir):
    return Policy.load(tiny_model_dir)


def _recompute(policy: Policy, prompt: tuple[int, ...], completion: tuple[int, ...], temperature: float):
    batch = TokenBatch.build([prompt], [completion], int(policy.tokenizer.pad_token_id))
    with torch.no_grad():
        return policy.completion_logprobs(batch, temperature)[0, :len(completion)]


def test_a_halted_row_continued_later_has_the_log_probs_of_one_pass(policy):
    """Halt after one group finishes, continue the halted rows in a second call: every row's
    tokens, across both calls, carry log-probs equal to a single recompute over the whole
    completion (same weights): the continuation is exact."""
    prompts = policy.encode_prompts(["Q: 2+3?\nA: ", "Q: sort [3, 1]\nA: "])
    rows = [RowRequest(p, 12, g) for g, p in enumerate(prompts) for _ in range(3)]
    torch.manual_seed(0)
    first, halted = generate_partial(policy, rows, SamplingParams(max_new_tokens=12, temperature=1.3), need=1)
    assert len(first) == len(rows)
    # Either a group finished and the rest halted, or every row ended on its own first.
    assert halted == any(r.ended == HALTED for r in first)
    later = [RowRequest(rows[i].ids + r.ids, 12 - len(r.ids), rows[i].group)
             for i, r in enumerate(first) if r.ended == HALTED]
    second, _ = generate_partial(policy, later, SamplingParams(max_new_tokens=12, temperature=1.3), need=None) \
        if later else ([], False)
    assert all(r.ended in (EOS, BUDGET) for r in second)
    it = iter(second)
    for req, r in zip(rows, first):
        ids, lps = r.ids, r.logprobs
        if r.ended == HALTED:
            nxt = next(it)
            ids, lps = ids + nxt.ids, lps + nxt.logprobs
        assert 1 <= len(ids) <= 12 and len(lps) == len(ids)
        assert (ids[-1] == policy.eos_token_id) or len(ids) == 12
        want = _recompute(policy, req.ids, ids, 1.3)
        assert torch.allclose(torch.tensor(lps), want, atol=1e-4)


def test_rows_never_reached_come_back_halted_and_untouched(policy):
    """With one row a call, a need met in the first call leaves later rows unstarted."""
    prompt = policy.encode_prompts(["Q: 1+1?\nA: "])[0]
    rows = [RowRequest(prompt, 4, 0), RowRequest(prompt, 4, 1), RowRequest(prompt, 4, 2)]
    old = policy.generation_batch_size
    policy.generation_batch_size = 1
    try:
        out, halted = generate_partial(policy, rows, SamplingParams(max_new_tokens=4), need=1)
    finally:
        policy.generation_batch_size = old
    assert out[0].ended in (EOS, BUDGET) and halted
    assert out[1:] == [out[1]] * 2 and out[1].ids == () and out[1].ended == HALTED


def test_budgets_must_leave_room():
    with pytest.raises(ValueError, match="budget"):
        generate_partial(None, [RowRequest((1,), 0, 0)], SamplingParams(), need=None)


def test_a_completion_of_two_versions_weighs_each_token_by_the_version_that_sampled_it():
    """Four tokens: version 3 sampled the first two (log μ -1, -2), version 4 the last two after
    the step carried the row over (log μ -0.5, -0.25). The learner now at version 5 gives log π
    -1.5, -1, -0.5, -1. The per-token ratios are exp(log π - log μ) token by token, whichever
    version's μ that is: e^-0.5, e^1, e^0, e^-0.75; the sequence weight is their product e^-0.25."""
    logp = torch.tensor([[-1.5, -1.0, -0.5, -1.0]])
    mu = torch.tensor([[-1.0, -2.0, -0.5, -0.25]])  # versions 3, 3, 4, 4
    mask = torch.ones(1, 4)
    ratios = token_log_ratios(logp, mu, mask).exp()
    assert torch.allclose(ratios, torch.tensor([[math.exp(-0.5), math.e, 1.0, math.exp(-0.75)]]))
    seq = sequence_log_weights(logp, mask, torch.tensor([mu.sum()]))
    assert torch.allclose(seq, torch.tensor([-0.25]))
