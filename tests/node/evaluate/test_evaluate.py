"""Held-out evaluation: the statistics with hand-computed numbers, and ``evaluate`` on the tiny
model: the training reward's correctness, greedy decoding, rows per call, a forked random stream."""

from __future__ import annotations

import json
import logging
from dataclasses import replace

import pytest
import torch

from swarm_node.node.config.config import load_config
from swarm_node.node.evaluate.evaluate import CPU_ROWS_PER_CALL, TaskOutcome, eval_settings, evaluate, greedy_texts, pass_at_k, summarise
from swarm_node.node.config.policy_loader import load_policy
from swarm_node.policies.policy import Completion
from swarm_node.rewards.answer import format_answer
from swarm_node.rewards.held_out import held_out_ids
from swarm_node.rewards.registry import make_task

pytestmark = pytest.mark.usefixtures("one_torch_thread")


# -- the statistics ------------------------------------------------------------------------------
@pytest.mark.parametrize("n, c, k, expected", [
    (4, 1, 1, 0.25),  # pass@1 is the fraction correct
    (4, 1, 2, 0.5),  # 1 - C(3,2)/C(4,2) = 1 - 3/6
    (5, 2, 3, 0.9),  # 1 - C(3,3)/C(5,3) = 1 - 1/10
    (4, 3, 2, 1.0),  # fewer wrong than k: every draw of 2 holds a correct one
    (4, 0, 4, 0.0),
    (4, 2, 4, 1.0),
])
def test_pass_at_k_by_hand(n, c, k, expected):
    assert pass_at_k(n, c, k) == pytest.approx(expected)


@pytest.mark.parametrize("n, c, k", [(4, 5, 1), (4, 1, 0), (4, 1, 5), (0, 0, 1)])
def test_pass_at_k_refuses_impossible_counts(n, c, k):
    with pytest.raises(ValueError):
        pass_at_k(n, c, k)


def test_summarise_by_hand():
    outcomes = [TaskOutcome("arithmetic", 1.0, (1.0, 0.0, 0.0, 0.0)),
                TaskOutcome("arithmetic", 0.0, (1.0, 1.0, 0.0, 0.0)),
                TaskOutcome("lists", 0.0, (0.0, 0.0, 0.0, 0.0))]
    s = summarise(outcomes, k=2)
    assert s["greedy"] == pytest.approx(1 / 3) and s["n"] == 3 and s["k"] == 2
    assert s["sampled"] == pytest.approx((0.25 + 0.5 + 0.0) / 3)
    # pass@2: 1 - C(3,2)/C(4,2) = 0.5; 1 - C(2,2)/C(4,2) = 5/6; 0
    assert s["pass_at_k"] == pytest.approx((0.5 + 5 / 6 + 0.0) / 3)
    assert s["families"]["arithmetic"] == pytest.approx({"greedy": 0.5, "sampled": 0.375, "n": 2,
                                                         "pass_at_k": (0.5 + 5 / 6) / 2})
    assert s["families"]["lists"] == {"greedy": 0.0, "sampled": 0.0, "n": 1, "pass_at_k": 0.0}
    plain = summarise(outcomes)
    assert "pass_at_k" not in plain and "k" not in plain


def test_summarise_leaves_out_what_was_not_generated():
    s = summarise([TaskOutcome("lists", None, (1.0, 0.0)), TaskOutcome("lists", None, (1.0, 1.0))])
    assert s["greedy"] is None and s["sampled"] == pytest.approx(0.75)
    s = summarise([TaskOutcome("lists", 1.0, ()), TaskOutcome("boolean", 0.0, ())])
    assert s["sampled"] is None and s["greedy"] == 0.5 and s["families"]["boolean"]["greedy"] == 0.0


# -- evaluate on the tiny model -------------------------------------------------------------------
@pytest.fixture(scope="module")
def tiny(warm_tiny_model_dir):
    cfg = load_config(None, {"model.name": str(warm_tiny_model_dir), "generation.prompts_per_step": 2,
                             "generation.num_generations": 4, "generation.max_completion_length": 8,
                             "tasks.families": ["arithmetic", "lists"], "eval.tasks_per_family": 4})
    return cfg, load_policy(cfg)


class _Answers:
    """A sampler that answers every prompt right in its first sample and wrong in the rest, and
    records how many rows each call asked for."""

    def __init__(self, tasks):
        self.answers = {t.prompt: t.answer for t in tasks}
        self.rows: list[int] = []

    def generate(self, prompts, n, params):
        self.rows.append(len(prompts) * n)
        return [[Completion((), (1,), format_answer(self.answers[p] if g == 0 else "wrong"), (-0.1,), False)
                 for g in range(n)] for p in prompts]


def test_correct_means_the_training_rewards_correctness(tiny):
    cfg, policy = tiny
    s = replace(eval_settings(cfg, prompt_kind="raw"), greedy=False, pass_k=4, rows_per_call=8)
    sampler = _Answers([make_task(t) for t in s.task_ids])
    result = evaluate(policy, s, "0:1", sampler=sampler)
    assert result["greedy"] is None and result["n"] == 8
    assert result["sampled"] == pytest.approx(0.25)  # 1 of 4 samples right, on every task
    assert result["pass_at_k"] == pytest.approx(1.0) and result["k"] == 4
    assert result["families"]["lists"]["sampled"] == pytest.approx(0.25)
    assert max(sampler.rows) <= s.rows_per_call and sum(sampler.rows) == 8 * 4


def test_rows_per_call_fit_where_training_generates(tiny):
    cfg, _ = tiny
    on = {"model.name": cfg.model.name, "generation.prompts_per_step": 2, "generation.num_generations": 4}
    def rows(c):
        return eval_settings(c, prompt_kind="raw").rows_per_call

    assert rows(load_config(None, {**on, "model.device": "cuda:0"})) == 2 * 4  # a step's rows
    assert rows(load_config(None, {**on, "generation.batch_size": 4})) == 4
    assert rows(cfg) == CPU_ROWS_PER_CALL  # a CPU: few calls, memory does not bind


def test_evaluate_is_seeded_and_leaves_the_callers_random_stream_alone(tiny):
    cfg, policy = tiny
    s = eval_settings(cfg, prompt_kind="raw")
    torch.manual_seed(7)
    expected = torch.rand(3)
    torch.manual_seed(7)
    a = evaluate(policy, s, "0:4")
    assert torch.equal(torch.rand(3), expected)  # training samples what it would have without the evaluation
    b = evaluate(policy, s, "0:4")
    assert {k: v for k, v in a.items() if k != "seconds"} == {k: v for k, v in b.items() if k != "seconds"}
    assert set(a["families"]) == {"arithmetic", "lists"} and a["n"] == 8 and a["seconds"] > 0
    assert len(a["greedy_answers"]) == 4 * 8  # each task's greedy answer, 4 hex digits
    assert s.task_ids == tuple(held_out_ids(["arithmetic", "lists"], [1], 4))


def test_greedy_is_the_most_likely_token_at_every_step(tiny):
    cfg, policy = tiny
    prompts = [make_task(t).prompt for t in held_out_ids(["arithmetic", "lists"], [1], 2)]
    texts = greedy_texts(policy, prompts, 6, rows_per_call=3)  # two calls: 3 rows, then 1
    assert texts == greedy_texts(policy, prompts, 6, rows_per_call=4)
    eos = policy.eos_token_id
    for prompt, text in zip(prompts, texts):
        ids = list(policy.encode_prompts([prompt])[0])
        out = []
        with torch.no_grad():
            for _ in range(6):
                nxt = int(policy.model(torch.tensor([ids + out])).logits[0, -1].argmax())
                out.append(nxt)
                if nxt == eos:
                    break
        assert text == policy.tokenizer.decode(out, skip_special_tokens=True)


def test_an_evaluation_the_default_models_warm_start_may_have_taught_is_warned_about(caplog):
    """On the embedded model, more tasks a family than its warm start left out (or other levels)
    may ask questions it was taught: the evaluation runs, and says so (policies/default_model.py)."""
    from swarm_node.policies.default_model import DefaultModelRecipe

    caplog.set_level(logging.WARNING, logger="swarm_node.node.run.evaluate")
    left_out = DefaultModelRecipe().held_out_tasks
    on = {"tasks.families": ["counting"], "tasks.difficulties": [2]}
    eval_settings(load_config(None, {**on, "eval.tasks_per_family": left_out}), prompt_kind="raw")
    assert not caplog.records
    eval_settings(load_config(None, {**on, "eval.tasks_per_family": left_out + 1}), prompt_kind="raw")
    assert f"eval.tasks_per_family {left_out + 1} is more than the {left_out}" in caplog.text
    caplog.clear()  # another model: its own warm start, if any, is not this recipe's
    eval_settings(load_config(None, {**on, "eval.tasks_per_family": left_out + 1, "model.name": "org/model"}),
                  prompt_kind="raw")
    assert not caplog.records


def test_a_family_without_held_out_questions_is_named_and_left_out(tiny, tmp_path, caplog):
    """A 3-row dataset has no question to hold out (rewards/reserved.py): the evaluation names it
    and goes on with the others; with no other family there is nothing to evaluate, and the node's
    evaluation is off instead of failing at every step."""
    from swarm_node.node.evaluate.evaluate import HeldOut
    from swarm_node.rewards.registry import resolve_families

    cfg, policy = tiny
    rows = tmp_path / "few.jsonl"
    rows.write_text("".join(json.dumps({"question": f"q{i}", "answer": str(i)}) + "\n" for i in range(3)))
    [few] = resolve_families([f"jsonl:{rows}"])
    on = {"model.name": cfg.model.name, "eval.tasks_per_family": 2}
    caplog.set_level(logging.WARNING, logger="swarm_node.node.run.evaluate")
    s = eval_settings(load_config(None, {**on, "tasks.families": ["arithmetic", f"jsonl:{rows}"]}), prompt_kind="raw")
    assert f"no held-out questions for task family {few}: no level has the 4 questions" in caplog.text
    result = evaluate(policy, replace(s, samples=1), "0:1")
    assert set(result["families"]) == {"arithmetic"} and result["n"] == 2 and result["unevaluated"] == [few]
    alone = load_config(None, {**on, "tasks.families": [f"jsonl:{rows}"]})
    assert evaluate(policy, eval_settings(alone, prompt_kind="raw"), "0:1")["n"] == 0  # no prompt: no IndexError
    # Settings made before the model was loaded have no reward yet: evaluating with them is refused.
    with pytest.raises(ValueError, match="prompt kind"):
        evaluate(policy, eval_settings(alone, prompt_kind=None), "0:1")
    assert HeldOut(alone, policy, None).settings is None and "held-out evaluation is off" in caplog.text
