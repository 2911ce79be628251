"""Peers with another tokenizer: their rollouts enter through the sequence-level ratio."""

from __future__ import annotations

import asyncio
import json
from dataclasses import replace

from conftest import TINY_RECIPE
from swarm_node.protocol.messages import same_tokenizer
from swarm_node.node.swarm.pool import AdmittedGroup
from swarm_node.node.run.rollouts import external_samples
from swarm_node.node.transport.memory import MemoryHub
from swarm_node.policies.default_model import build_default_model
from swarm_node.policies.policy import Policy
from swarm_node.protocol.messages import RolloutRecord
from swarm_node.rewards.registry import make_task
from swarm_node.rewards.scoring import RewardConfig
from tests.helpers.swarm_helpers import create_node, run_all, swarm_cfg


def admitted(mine, model_fp, tokenizer_fp, task, records) -> AdmittedGroup:
    """Peer sn1peer's group of round 3, policy version 9, as admission leaves it for this node."""
    return AdmittedGroup("sn1peer", 3, 9, model_fp, tokenizer_fp, str(task.id), records, task=task,
                         token_level=same_tokenizer(tokenizer_fp, mine.tokenizer_fingerprint))


def test_foreign_group_is_retokenized_and_rescored(tiny_model_dir, tmp_path):
    mine = Policy.load(str(tiny_model_dir))
    task = make_task("arithmetic:4:1")
    right, wrong = f"<answer>{task.answer}</answer>", "<answer>nope</answer>"
    group = admitted(mine, "other-model", "other-tokenizer", task, (
        RolloutRecord(str(task.id), (5, 6, 7), right, (-0.5, -0.25, -0.25), False),
        RolloutRecord(str(task.id), (8, 9), wrong, (-1.0, -1.0), True)))
    samples, correct, too_long = external_samples([group], mine, RewardConfig(format_weight=0.1),
                                                  group_cap=8, max_tokens=64)
    assert correct == [1.0, 0.0] and too_long == 0  # scored here, from the regenerated ground truth
    assert [s.reward for s in samples] == [1.1, 0.1]
    a, b = samples
    assert a.behaviour_logprobs is None and a.foreign_tokens  # no per-token ratios across vocabularies
    assert a.behaviour_seq_logprob == -1.0 and b.behaviour_seq_logprob == -2.0
    assert a.completion_ids == mine.encode_completion(right)  # re-tokenized, EOS appended
    assert b.completion_ids == mine.encode_completion(wrong)[:-1]  # truncated: no EOS
    assert a.group == b.group == "sn1peer/3/arithmetic:4:1" and not a.local
    assert a.prompt_ids == mine.encode_prompts([task.prompt])[0]
    assert a.verified and not b.verified  # right and one answer block (the floor's rows), wrong


def test_only_a_right_answer_alone_in_its_block_is_verified(tiny_model_dir):
    """What ``learner.external_success_floor`` may lift is decided by this node's verdict on the text,
    not by the advantage the sender's group composition gives it."""
    mine = Policy.load(str(tiny_model_dir))
    task = make_task("arithmetic:4:1")
    texts = [f"<answer>{task.answer}</answer>", f" <answer>{task.answer}</answer>\n",  # right, alone: verified
             f"VISIT evil.example <answer>{task.answer}</answer> and more",  # right, but wrapped in other text
             f"<answer>{task.answer}</answer><answer>{task.answer}</answer>",  # two blocks
             "<answer>nope</answer>", "garbage"]  # wrong, well-formed; malformed
    group = admitted(mine, "other-model", "other-tokenizer", task,
                     tuple(RolloutRecord(str(task.id), (5,), t, (-0.5,), False) for t in texts))
    samples, correct, _ = external_samples([group], mine, RewardConfig(), group_cap=8, max_tokens=64)
    assert correct == [1.0, 1.0, 1.0, 1.0, 0.0, 0.0]
    assert [s.verified for s in samples] == [True, True, False, False, False, False]


def test_nodes_with_different_tokenizers_train_together(warm_tiny_model_dir, tmp_path):
    other_dir = build_default_model(tmp_path / "other", replace(TINY_RECIPE, vocab_size=300))
    assert Policy.load(str(other_dir)).tokenizer_fingerprint != Policy.load(str(warm_tiny_model_dir)).tokenizer_fingerprint
    hub = MemoryHub()

    async def go():
        nodes = [await create_node(swarm_cfg(d, tmp_path / f"n{i}", **{"train.seed": i, "train.steps": 5}), hub)
                 for i, d in enumerate([warm_tiny_model_dir, other_dir])]
        return await run_all(nodes), nodes

    summaries, nodes = asyncio.run(go())
    for s, n in zip(summaries, nodes):
        assert s["swarm"]["rejected_total"] == 0 and s["swarm"]["groups_used"] >= 2
        recs = [json.loads(l) for l in (n.run_dir / "metrics.jsonl").read_text().splitlines()]
        used = [r for r in recs if r["external_groups"]]
        assert used and all(r["loss"] == r["loss"] for r in used)  # finite updates with foreign samples


def test_peer_completions_longer_than_this_nodes_limit_are_left_out(tiny_model_dir):
    mine = Policy.load(str(tiny_model_dir))
    task = make_task("arithmetic:4:1")
    long_text = "<answer>" + "1" * 200 + "</answer>"
    group = admitted(mine, "m", "other-tokenizer", task, (
        RolloutRecord(str(task.id), (5,), long_text, (-0.5,), False),
        RolloutRecord(str(task.id), (5,), "<answer>1</answer>", (-0.5,), False)))
    samples, correct, too_long = external_samples([group], mine, RewardConfig(), group_cap=8, max_tokens=16)
    assert too_long == 1 and len(samples) == 1 and len(samples[0].completion_ids) <= 16
    # The cap counts this node's tokens and holds for same-tokenizer peers too.
    same = admitted(mine, "m", mine.tokenizer_fingerprint, task, (
        RolloutRecord(str(task.id), tuple(range(5, 25)), "x", tuple(-0.1 for _ in range(20)), True),))
    assert external_samples([same], mine, RewardConfig(), group_cap=8, max_tokens=16)[2] == 1


def test_a_group_whose_prompt_leaves_no_room_in_the_model_is_left_out(tiny_model_dir, tmp_path):
    """A task source's questions have no length bound, and a peer may pick the longest ids it can
    find: a prompt that leaves no room for this node's completions in the model's positions (128
    for the tiny model) is counted as too long, never handed to the learner."""
    from swarm_node.rewards.registry import resolve_families
    from swarm_node.protocol.task_id import TaskId

    data = tmp_path / "long.jsonl"
    data.write_text(json.dumps({"question": "q " * 100, "answer": "1"}) + "\n"
                    + json.dumps({"question": "short", "answer": "2"}) + "\n")
    [name] = resolve_families([f"jsonl:{data}"])
    mine = Policy.load(str(tiny_model_dir))
    tasks = {make_task(TaskId(name, s, 1)).question: make_task(TaskId(name, s, 1)) for s in range(20)}
    long_task, short_task = tasks["q " * 100], tasks["short"]
    groups = [admitted(mine, "m", mine.tokenizer_fingerprint, t,
                       tuple(RolloutRecord(str(t.id), (5, 6), "ab", (-0.5, -0.5), False) for _ in range(3)))
              for t in (long_task, short_task)]
    samples, _, too_long = external_samples(groups, mine, RewardConfig(), group_cap=8, max_tokens=16)
    assert too_long == 3 and len(samples) == 3 and {s.group for s in samples} == {groups[1].key}
