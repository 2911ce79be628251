"""Prompts in the model's own format (policies/prompt_format.py): the raw template for the embedded
model, the chat template with a system message for a model that has one (a tiny Qwen2 saved with
a chat template trains through it), and the format folded into what rollouts say of their tokens,
so a peer that prompts otherwise goes the sequence-level path."""

from __future__ import annotations

from pathlib import Path

import pytest

from swarm_node.node.errors import ConfigError
from swarm_node.node.config.config import load_config
from swarm_node.node.config.policy_loader import load_policy
from swarm_node.policies.prompt_format import DEFAULT_SYSTEM, EXAMPLE, RAW, REMINDER, PromptFormat, choose_format
from swarm_node.protocol.messages import same_tokenizer
from swarm_node.rewards.registry import make_task
from tests.helpers.swarm_helpers import train_to_end

pytestmark = pytest.mark.usefixtures("one_torch_thread")

TEMPLATE = ("{% for m in messages %}<|{{ m.role }}|>{{ m.content }}\n{% endfor %}"
            "{% if add_generation_prompt %}<|assistant|>{% endif %}")


@pytest.fixture(scope="module")
def chat_model_dir(tiny_model_dir, tmp_path_factory) -> Path:
    """The tiny model with a chat template, saved by save_pretrained as an instruct model is."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    out = tmp_path_factory.mktemp("chat") / "model"
    tok = AutoTokenizer.from_pretrained(tiny_model_dir)
    tok.chat_template = TEMPLATE
    tok.save_pretrained(out)
    AutoModelForCausalLM.from_pretrained(tiny_model_dir).save_pretrained(out)
    return out


class _Tok:
    chat_template = TEMPLATE

    def apply_chat_template(self, messages, tokenize, add_generation_prompt):
        assert tokenize is False and add_generation_prompt is True
        return "".join(f"<|{m['role']}|>{m['content']}\n" for m in messages) + "<|assistant|>"


def test_raw_is_swarm_nodes_template_and_keeps_the_tokenizers_fingerprint():
    assert RAW.text(None, "12+7=") == "Q: 12+7=\nA: "
    assert RAW.fingerprint("abcd") == "abcd"
    assert choose_format(object()) is RAW  # no chat template: auto is raw
    with pytest.raises(ValueError, match="has no chat template"):
        choose_format(object(), "chat")


def test_chat_puts_the_system_message_first_and_changes_the_fingerprint():
    fmt = choose_format(_Tok())  # the default: no example
    assert fmt.kind == "chat" and fmt.system == DEFAULT_SYSTEM
    assert fmt.text(_Tok(), "12+7=") == f"<|system|>{DEFAULT_SYSTEM}\n<|user|>12+7=\n<|assistant|>"
    assert "<answer>" in DEFAULT_SYSTEM  # the system message states the format the reward reads
    assert choose_format(_Tok(), "raw") is RAW
    fp = fmt.fingerprint("abcd")
    assert fp != "abcd" and len(fp) == 16
    # Another system message or another template is another behaviour policy.
    assert PromptFormat("chat", "be brief", TEMPLATE).fingerprint("abcd") != fp
    assert PromptFormat("chat", DEFAULT_SYSTEM, TEMPLATE + " ").fingerprint("abcd") != fp
    assert PromptFormat("chat", DEFAULT_SYSTEM, TEMPLATE).fingerprint("abcd") == fp


def test_the_worked_example_comes_before_the_question_and_the_reminder_after_each():
    fmt = choose_format(_Tok(), example=True)
    q, a = EXAMPLE
    assert fmt.text(_Tok(), "12+7=") == (f"<|system|>{DEFAULT_SYSTEM}\n<|user|>{q}{REMINDER}\n<|assistant|>{a}\n"
                                         f"<|user|>12+7={REMINDER}\n<|assistant|>")
    assert "<answer>" in a and "<answer>" in REMINDER
    # The example is part of how the node prompts: with and without it are two behaviour policies.
    assert fmt.fingerprint("abcd") != choose_format(_Tok(), example=False).fingerprint("abcd")
    assert "worked example" in fmt.describe()


def test_a_model_with_a_chat_template_is_prompted_through_it(chat_model_dir, tiny_model_dir, tmp_path):
    cfg = load_config(None, {"model.name": str(chat_model_dir)})
    chat = load_policy(cfg)
    task = make_task("counting:3:1")
    prompt = chat.prompt_of(task)
    assert prompt.startswith(f"<|system|>{DEFAULT_SYSTEM}") and f"<|user|>{task.question}\n" in prompt
    assert prompt.endswith("<|assistant|>") and EXAMPLE[1] not in prompt
    shown = load_policy(load_config(None, {"model.name": str(chat_model_dir), "generation.chat_example": True}))
    assert EXAMPLE[1] in shown.prompt_of(task) and f"<|user|>{task.question}{REMINDER}\n" in shown.prompt_of(task)
    raw = load_policy(load_config(None, {"model.name": str(chat_model_dir), "generation.prompt_format": "raw"}))
    assert raw.prompt_of(task) == task.prompt
    # Same tokenizer, other prompts: a raw node's token log-probs do not transfer to a chat node.
    assert raw.tokenizer_fingerprint == chat.tokenizer_fingerprint
    assert not same_tokenizer(raw.rollout_fingerprint, chat.rollout_fingerprint)
    # A stale node's behaviour copy (train.behaviour_lag) samples the same prompts.
    from swarm_node.node.run.behaviour_lag import LaggedBehaviour

    assert LaggedBehaviour(chat, 2, 0).behaviour.prompt_of(task) == prompt
    plain = load_policy(load_config(None, {"model.name": str(tiny_model_dir)}))
    assert plain.prompt_format is RAW and plain.rollout_fingerprint == plain.tokenizer_fingerprint
    with pytest.raises(ConfigError, match="has no chat template"):
        load_policy(load_config(None, {"model.name": str(tiny_model_dir), "generation.prompt_format": "chat"}))


def test_a_run_trains_and_evaluates_through_the_chat_template(chat_model_dir, tmp_path):
    import json

    cfg = load_config(None, {"model.name": str(chat_model_dir), "run.dir": str(tmp_path / "run"),
                             "run.progress": "off", "run.plot": False, "generation.prompts_per_step": 2,
                             "generation.num_generations": 2, "generation.max_completion_length": 4,
                             "train.steps": 2, "eval.every": 2, "eval.tasks_per_family": 2, "eval.samples": 1,
                             "tasks.families": ["counting"]})
    summary = train_to_end(cfg)
    assert summary["steps"] == 2
    recs = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert recs[-1]["eval"]["families"]["counting"]["n"] == 2
    saved = json.loads((tmp_path / "run" / "config.json").read_text())
    assert saved["generation"]["prompt_format"] == "auto"
    # The exported model keeps its template, and its card says how it was prompted.
    from transformers import AutoTokenizer

    from swarm_node.node.cli import main

    assert main(["export", str(tmp_path / "run"), "--out", str(tmp_path / "model")]) == 0
    card = (tmp_path / "model" / "README.md").read_text()
    assert "Prompts are the tokenizer's chat template" in card and DEFAULT_SYSTEM in card
    assert AutoTokenizer.from_pretrained(tmp_path / "model").chat_template == TEMPLATE
