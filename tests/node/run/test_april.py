"""Tests of node/run/april.py: a step returns exactly the groups it needs, the oldest first; what
does not finish is carried and continued first, with each token's log-prob and the version of its
oldest token; the buffer stays bounded and nothing is lost."""

from __future__ import annotations

import collections

import pytest
import torch

from swarm_node.node.run.april import PartialRollouts
from swarm_node.node.run.rollouts import round_task_ids
from swarm_node.policies.policy import Policy, SamplingParams, TokenBatch
from swarm_node.rewards.scoring import RewardConfig

pytestmark = pytest.mark.usefixtures("one_torch_thread")  # tests/conftest.py

FAMILIES = ["arithmetic", "lists", "base", "boolean", "counting"]


def test_prompts_started_fill_the_groups_in_play_with_those_carried():
    april = PartialRollouts(0.5, group_size=4, max_tokens=16)
    assert april.in_play(8) == 12 and april.new_prompts(8) == 12
    april.groups = [object()] * 5  # five carried
    assert april.new_prompts(8) == 7
    april.groups = [object()] * 13
    assert april.new_prompts(8) == 0  # never more in play than need x (1 + over_provision)
    with pytest.raises(ValueError):
        PartialRollouts(0.0, 4, 16)


@pytest.fixture(scope="module")
def policy(warm_tiny_model_dir):
    return Policy.load(warm_tiny_model_dir)


def test_steps_return_their_need_continue_the_carried_first_and_lose_nothing(policy):
    need, G, T = 4, 4, 24
    april = PartialRollouts(1.0, group_size=G, max_tokens=T)
    params = SamplingParams(max_new_tokens=T, temperature=1.5)  # a wider spread of lengths
    torch.manual_seed(0)
    started, returned, halts, mixed = [], [], 0, 0
    for step in range(8):
        carried_ids = [str(g.task_id) for g in april.groups]
        ids = round_task_ids(0, step, april.new_prompts(need), FAMILIES, [1])
        started += [str(t) for t in ids]
        rollouts, stats = april.generate(policy, ids, need, params, version=step, reward_cfg=RewardConfig(), step=step)
        groups = list(dict.fromkeys(str(r.task_id) for r in rollouts))
        assert len(groups) == need and len(rollouts) == need * G  # exactly the step's need
        # The oldest first: whatever was carried in and finished comes before this step's own.
        finished_carried = [g for g in groups if g in carried_ids]
        assert groups[:len(finished_carried)] == finished_carried
        assert stats["april_carried"] == len(april.groups) <= april.in_play(need) - need
        halts += stats["april_halted"]
        for r in rollouts:
            c = r.completion
            assert len(c.logprobs) == len(c.completion_ids) and 1 <= len(c.completion_ids) <= T
            assert c.truncated == (c.completion_ids[-1] != policy.eos_token_id)
            assert r.policy_version <= step
            mixed += r.policy_version < step
        returned += groups
    assert halts > 0 and mixed > 0  # the setting did carry completions over (else this shows nothing)
    # Nothing lost, nothing twice: every group started is returned once or still carried.
    in_buffer = [str(g.task_id) for g in april.groups]
    assert sorted(returned + in_buffer) == sorted(started)
    assert max(collections.Counter(returned).values()) == 1


def test_a_carried_completion_keeps_each_tokens_log_prob_of_the_weights_that_sampled_it(policy):
    """Carry completions over a weight change: the tokens sampled before it have the log-probs of
    the old weights, those after it the new ones', token by token (checked by recomputing each
    part under its own weights)."""
    april = PartialRollouts(3.0, group_size=4, max_tokens=24)
    params = SamplingParams(max_new_tokens=24, temperature=1.5)
    torch.manual_seed(1)
    old = {k: v.clone() for k, v in policy.model.state_dict().items()}
    ids = round_task_ids(1, 0, april.new_prompts(1), FAMILIES, [1])
    april.generate(policy, ids, 1, params, version=0, reward_cfg=RewardConfig(), step=0)
    before = {str(g.task_id): [row.ids for row in g.rows] for g in april.groups}
    assert any(row for rows in before.values() for row in rows)  # something was carried part-way
    try:
        with torch.no_grad():
            for p in policy.model.parameters():
                p.add_(torch.randn_like(p) * 0.05)  # version 1
        new = {k: v.clone() for k, v in policy.model.state_dict().items()}
        out, _ = april.generate(policy, [], 4, params, version=1, reward_cfg=RewardConfig(), step=1)
        checked = 0
        for r in out:
            key = str(r.task_id)
            if key not in before:
                continue
            k = next(i for i, ids0 in enumerate(before[key]) if r.completion.completion_ids[:len(ids0)] == ids0)
            n_old = len(before[key][k])
            c = r.completion
            batch = TokenBatch.build([c.prompt_ids], [c.completion_ids], int(policy.tokenizer.pad_token_id))
            with torch.no_grad():
                policy.model.load_state_dict(old)
                lp_old = policy.completion_logprobs(batch, 1.5)[0, :n_old]
                policy.model.load_state_dict(new)
                lp_new = policy.completion_logprobs(batch, 1.5)[0, n_old:len(c.completion_ids)]
            assert torch.allclose(torch.tensor(c.logprobs[:n_old]), lp_old, atol=1e-4)
            assert torch.allclose(torch.tensor(c.logprobs[n_old:]), lp_new, atol=1e-4)
            assert r.policy_version == (0 if n_old else 1)
            checked += n_old > 0 and len(c.completion_ids) > n_old
        assert checked > 0
    finally:
        policy.model.load_state_dict(old)


def test_a_row_carried_past_the_staleness_bound_is_restarted_not_published_with_an_old_label(policy):
    """One straggler would label its whole published batch with its oldest version (and a worker's
    learner drops every group of a batch past its bound): a row whose oldest token is more than
    max_age versions behind the generating weights starts again from its prompt."""
    april = PartialRollouts(3.0, group_size=4, max_tokens=24, max_age=2)
    params = SamplingParams(max_new_tokens=24, temperature=1.5)
    torch.manual_seed(1)
    ids = round_task_ids(1, 0, april.new_prompts(1), FAMILIES, [1])
    april.generate(policy, ids, 1, params, version=0, reward_cfg=RewardConfig(), step=0)
    carried = [row for g in april.groups for row in g.rows if row.ids]
    assert carried and all(row.oldest == 0 for row in carried)  # tokens from version 0 carried
    # (no generation in between: a step that already has its group ready generates nothing)
    assert april._restart_stale(2) == 0  # 2 versions behind: within max_age, kept
    assert all(row.ids for row in carried)
    n_rows = sum(1 for g in april.groups for row in g.rows if row.oldest is not None)
    out, stats = april.generate(policy, [], 1, params, version=3, reward_cfg=RewardConfig(), step=3)
    assert stats["april_restarted_rows"] == n_rows  # 3 behind: every row with version-0 tokens restarted
    assert all(r.policy_version == 3 for r in out)  # nothing published under the old label
    assert all(row.oldest in (None, 3) for g in april.groups for row in g.rows)
    with pytest.raises(ValueError):
        PartialRollouts(1.0, 4, 16, max_age=-1)


def test_the_carry_bound_is_the_bound_where_the_rollouts_are_trained():
    from swarm_node.node.config.config import NodeConfig
    from swarm_node.node.run.step_generation import carry_bound

    cfg = NodeConfig()
    assert carry_bound(cfg) == cfg.learner.max_off_policy_steps  # synchronous: trained at once
    cfg.train.max_async = 2
    assert carry_bound(cfg) == cfg.learner.max_off_policy_steps - 2  # trained up to 2 versions later
    cfg = NodeConfig()
    cfg.broadcast.role, cfg.broadcast.follow, cfg.broadcast.max_staleness = "worker", "sn1x", 3
    assert carry_bound(cfg) == 3  # its learner's bound on its workers
