"""Verified is not canonical (node/run/peer_sft.py, ``targets``): a peer's row that this node scores
right and well-formed still enters the supervised term only if its token ids are exactly this node's
encoding of its task's canonical completion, ``format_answer(task.answer)`` and EOS. Each hostile
form below is verified, and each is left out; the honest row enters, from a peer with this node's
tokenizer and from one with another."""

from __future__ import annotations

import pytest

from swarm_node.node.run.peer_sft import choose_supervised, targets
from swarm_node.node.run.rollouts import external_samples
from swarm_node.node.swarm.pool import AdmittedGroup
from swarm_node.policies.policy import Policy
from swarm_node.protocol.messages import RolloutRecord
from swarm_node.rewards.answer import format_answer
from swarm_node.rewards.registry import make_task
from swarm_node.rewards.scoring import RewardConfig, score


@pytest.fixture(scope="module")
def policy(tiny_model_dir):
    return Policy.load(str(tiny_model_dir))


def _hostile(policy, task) -> dict[str, tuple[str, tuple[int, ...]]]:
    """name -> (text, token ids as a same-tokenizer peer sends them)."""
    canon = format_answer(task.answer)
    enc = policy.encode_completion
    by_char = tuple(i for ch in canon for i in policy.tokenizer(ch, add_special_tokens=False)["input_ids"])
    return {
        # newlines before the block and " \n" after it (fewer than the reviewer's 120 and 60: the
        # tiny model has 128 positions; test_the_padding_would_have_been_most_of_the_row has those)
        "padding around": ("\n" * 12 + canon + " \n" * 6, enc("\n" * 12 + canon + " \n" * 6)),
        "padding before": ("\n\n" + canon, enc("\n\n" + canon)),
        # text after </answer>, before EOS: it would teach the node not to stop
        "padding after": (canon + " \n" * 6, enc(canon + " \n" * 6)),
        "space after": (canon + " ", enc(canon + " ")),
        # the right text, split into tokens of the peer's choosing (it decodes to the same text)
        "another split": (canon, by_char + (policy.eos_token_id,)),
        # the right text with no EOS: a completion that never stopped
        "no eos": (canon, enc(canon)[:-1]),
        "eos twice": (canon, enc(canon) + (policy.eos_token_id,)),
    }


def _group(policy, task, records, token_level: bool) -> AdmittedGroup:
    fp = policy.rollout_fingerprint if token_level else "another-tokenizer"
    return AdmittedGroup("sn1peer", 3, 9, "model", fp, str(task.id), tuple(records), task=task, token_level=token_level)


def _record(task, text, ids) -> RolloutRecord:
    return RolloutRecord(str(task.id), ids, text, (-0.5,) * len(ids), False)


def _choose(policy, groups):
    room = policy.model.config.max_position_embeddings - len(policy.encode_prompts([policy.prompt_of(groups[0].task)])[0])
    samples, _, too_long = external_samples(groups, policy, RewardConfig(), group_cap=64, max_tokens=room)
    assert too_long == 0
    return choose_supervised(samples, targets(groups, policy.encode_completion), lambda task: True, 64, 1.0)


@pytest.mark.parametrize("task_id", ["counting:7:2", "lists:9:1", "arithmetic:4:1"])
def test_every_hostile_form_is_verified_and_left_out(policy, task_id):
    task = make_task(task_id)
    forms = _hostile(policy, task)
    # A right answer the family reads through its normalization: verified, never canonical.
    if task.id.family in ("arithmetic", "lists"):
        forms["zeros and spaces"] = (text := f"<answer>   +000000000{task.answer}   </answer>", policy.encode_completion(text))
    if task.id.family == "lists":
        forms["brackets and commas"] = (text := f"<answer>[[[(({task.answer},,,,))]]]</answer>",
                                        policy.encode_completion(text))
    canon = format_answer(task.answer)
    for name, (text, _) in forms.items():
        assert score(task, text).verified, name  # what verified lets through
    records = [_record(task, text, ids) for text, ids in forms.values()]
    honest = _record(task, canon, policy.encode_completion(canon))
    out = _choose(policy, [_group(policy, task, records + [honest], token_level=True)])
    assert out.verified == len(forms) + 1
    assert (out.canonical, out.chosen) == (1, 1)
    (row,) = [s for s in out.samples if s.supervised]
    assert row.completion_ids == policy.encode_completion(canon)


def test_the_padding_would_have_been_most_of_the_row(policy):
    """The reviewer's measure, in this tokenizer: padding is 97% of the padded row's tokens, so 97%
    of its mean-NLL weight (each token weighs 1/T_i)."""
    task = make_task("lists:9:1")
    canon = format_answer(task.answer)
    padded = policy.encode_completion("\n" * 120 + canon + " \n" * 60)
    assert 1 - len(policy.encode_completion(canon)) / len(padded) > 0.95


def test_another_tokenizer_is_held_to_the_same_text(policy):
    """A foreign peer's text is re-encoded here, so its ids are this node's encoding by construction:
    the canonical text enters, padding around it still does not, and a truncated one (no EOS) neither."""
    task = make_task("counting:7:2")
    canon = format_answer(task.answer)
    records = [_record(task, canon, (5, 6, 7)), _record(task, canon + "\n", (5, 6, 7, 8)),
               RolloutRecord(str(task.id), (5, 6, 7), canon, (-0.5,) * 3, True)]
    out = _choose(policy, [_group(policy, task, records, token_level=False)])
    assert (out.verified, out.canonical, out.chosen) == (3, 1, 1)
    assert [s.completion_ids for s in out.samples if s.supervised] == [policy.encode_completion(canon)]

