"""The learner's passes (policies/micro_batches.py), checked by hand, and a pass's layout
(``TokenBatch.take``) against the whole batch's."""

from __future__ import annotations

import pytest
import torch

from swarm_node.policies.micro_batches import Pass, plan_passes
from swarm_node.policies.token_batch import TokenBatch


def test_without_a_bound_or_within_it_one_pass_keeps_the_rows_in_their_order():
    assert plan_passes([3, 5], [4, 1]) == [Pass((0, 1), 5, 4)]
    assert plan_passes([3, 5], [4, 1], max_rows=2, max_tokens=18) == [Pass((0, 1), 5, 4)]  # 2 x (5 + 4)
    assert plan_passes([], []) == []


def test_rows_go_longest_first_and_a_pass_is_cut_before_its_budget():
    prompts, completions = [10, 10, 10, 10, 10], [2, 30, 5, 28, 3]  # totals 12 40 15 38 13
    # 80 tokens: 40+38 -> 2 x 40 = 80 fits; then 15, 13, 12 -> 3 x 15 = 45.
    assert plan_passes(prompts, completions, max_tokens=80) == [Pass((1, 3), 10, 30), Pass((2, 4, 0), 10, 5)]
    # The width is the longest prompt plus the longest completion, which may come from two rows.
    assert plan_passes([20, 5], [1, 20], max_tokens=44) == [Pass((1,), 5, 20), Pass((0,), 20, 1)]
    assert plan_passes([20, 5], [1, 20], max_tokens=80) == [Pass((0, 1), 20, 20)]


def test_rows_bound_too_and_ties_keep_the_batch_order():
    assert plan_passes([1] * 5, [2] * 5, max_rows=2) == [Pass((0, 1), 1, 2), Pass((2, 3), 1, 2), Pass((4,), 1, 2)]
    # Both bounds: whichever is hit first.
    assert plan_passes([1] * 4, [9] * 4, max_rows=3, max_tokens=20) == [Pass((0, 1), 1, 9), Pass((2, 3), 1, 9)]


def test_a_row_longer_than_the_budget_goes_alone_and_every_row_once():
    passes = plan_passes([4, 4, 4], [100, 1, 1], max_tokens=20)
    assert passes[0] == Pass((0,), 4, 100) and sorted(r for p in passes for r in p.rows) == [0, 1, 2]
    assert all(p.tokens <= 20 for p in passes[1:])
    with pytest.raises(ValueError, match="one prompt length"):
        plan_passes([1, 2], [3])


def test_a_pass_at_its_own_width_holds_its_rows_tokens_where_the_batch_does():
    batch = TokenBatch.build([(5, 6, 7), (8,), (9, 9)], [(1, 2, 3, 4), (1,), ()], pad_id=0)
    assert batch.lengths() == ([3, 1, 2], [4, 1, 0])
    part = batch.take([2, 1], prompt_len=2, completion_len=1)
    assert part.prompt_len == 2 and part.input_ids.tolist() == [[9, 9, 0], [0, 8, 1]]
    assert part.attention_mask.tolist() == [[1, 1, 0], [0, 1, 1]]
    assert part.completion_mask.tolist() == [[0.0], [1.0]]
    # A pass of no completion tokens still has one column (the batch's layout keeps one).
    assert batch.take([2], 2, 0).completion_mask.shape == (1, 1)
    for bad in ((4, 1), (2, 5), (0, 1)):
        with pytest.raises(ValueError, match="does not fit"):
            batch.take([0], *bad)


def test_a_pass_gives_the_whole_batchs_log_probs(tiny_model_dir):
    from swarm_node.policies.policy import Policy

    policy = Policy.load(tiny_model_dir)
    policy.model.eval()
    prompts = [tuple(range(3, 3 + n)) for n in (9, 4, 6, 2)]
    completions = [tuple(range(20, 20 + n)) for n in (2, 11, 5, 7)]
    batch = TokenBatch.build(prompts, completions, int(policy.tokenizer.pad_token_id))
    with torch.no_grad():
        whole = policy.completion_logprobs(batch)
        for p in plan_passes(*batch.lengths(), max_tokens=40):
            lp = policy.completion_logprobs(batch.take(p.rows, p.prompt_len, p.completion_len))
            torch.testing.assert_close(lp, whole[list(p.rows), :lp.shape[1]], rtol=0, atol=1e-5)
            assert not whole[list(p.rows), lp.shape[1]:].any()  # nothing cut but padding


def test_split_generation_takes_prompts_longest_first_and_answers_in_the_callers_order(tiny_model_dir,
                                                                                       monkeypatch):
    from swarm_node.policies.policy import Policy, SamplingParams

    policy = Policy.load(tiny_model_dir)
    policy.generation_batch_size = 2
    calls: list[list[int]] = []
    real = policy._sample
    monkeypatch.setattr(policy, "_sample", lambda rows, params: calls.append([len(r) for r in rows]) or real(rows, params))
    prompts = ["a", "a b c d e f g h", "a b c", "a b c d e f"]
    groups = policy.generate(prompts, 2, SamplingParams(max_new_tokens=3))
    want = policy.encode_prompts(prompts)
    assert [[c.prompt_ids for c in g] for g in groups] == [[p, p] for p in want]
    lengths = sorted((len(p) for p in want), reverse=True)
    assert calls == [[n, n] for n in lengths]  # one prompt's rows a call, the longest first
