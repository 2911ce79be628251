"""How a task's question becomes the text a policy sees: swarm-node's raw template
(``Q: {question}\\nA: ``, what the embedded model was warm-started on) or the model's own chat
template, with a system message that states the answer format the reward reads.

The format is part of what two nodes must agree on to use each other's token-level log-probs: a
completion's log-probs are conditioned on its prompt, so a peer that formats differently is a
different behaviour policy. ``Policy.rollout_fingerprint`` folds the format into the tokenizer's
fingerprint (raw keeps the tokenizer's own, so raw nodes are unchanged); a peer whose fingerprint
differs is taken on the sequence-level path (its text re-tokenized, its sequence log-prob the
behaviour claim, docs/algorithm.md) like a peer with another tokenizer.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

from swarm_node.rewards.task import PROMPT_TEMPLATE

__all__ = ["PromptFormat", "RAW", "DEFAULT_SYSTEM", "EXAMPLE", "REMINDER", "choose_format"]

DEFAULT_SYSTEM = ("Solve the task. Give your final answer between <answer> and </answer>, "
                  "for example <answer>42</answer>, and nothing after it.")
# A worked exchange before the question (one-shot) and a reminder after it (generation.chat_example,
# off by default): SmolLM2-135M-Instruct writes the tags more often with them, but rarely as the
# whole answer, and they double a short question's prompt (docs/results/bench_real_model.md). The
# example is generic arithmetic: it shows the format, and no task's answer.
EXAMPLE = ("What is 3 + 4 * 2?", "4 * 2 = 8, and 3 + 8 = 11.\n<answer>11</answer>")
REMINDER = "\nGive the final answer between <answer> and </answer>."


@dataclass(frozen=True)
class PromptFormat:
    """``raw`` (swarm-node's template) or ``chat`` (the tokenizer's chat template, ``system`` first)."""

    kind: str = "raw"
    system: str = ""
    template: str = ""  # the chat template's source: two models' templates can differ
    example: tuple[str, ...] = ()  # (question, answer) shown before the question, or none
    reminder: str = ""  # appended to the question

    def text(self, tokenizer, question: str) -> str:
        """The prompt text for ``question`` (tokenized with no added special tokens: a chat
        template writes its own)."""
        if self.kind == "raw":
            return PROMPT_TEMPLATE.format(question=question)
        messages = [{"role": "system", "content": self.system}] if self.system else []
        if self.example:
            messages += [{"role": "user", "content": self.example[0] + self.reminder},
                         {"role": "assistant", "content": self.example[1]}]
        messages.append({"role": "user", "content": question + self.reminder})
        return tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)

    def fingerprint(self, tokenizer_fp: str) -> str:
        """What a rollout's ``tokenizer_fingerprint`` says: the tokenizer's alone for raw, else a
        digest of it with the template and the system message."""
        if self.kind == "raw":
            return tokenizer_fp
        parts = (tokenizer_fp, "chat", self.template, self.system)
        if self.example or self.reminder:  # formats from before the example: the same digest
            parts += (*self.example, self.reminder)
        blob = "\x00".join(parts).encode()
        return hashlib.sha256(blob).hexdigest()[:16]

    def describe(self) -> str:
        if self.kind == "raw":
            return "raw (Q: ...\\nA: )"
        return "the model's chat template, with a system message" + (", a worked example" if self.example else "")


RAW = PromptFormat()


def choose_format(tokenizer, mode: str = "auto", system: str = DEFAULT_SYSTEM, example: bool = False) -> PromptFormat:
    """``auto``: the chat template when the tokenizer has one, else raw; ``chat`` insists.
    ``example``: chat prompts show ``EXAMPLE`` first and end the question with ``REMINDER``."""
    template = getattr(tokenizer, "chat_template", None) or ""
    if mode == "raw" or (mode == "auto" and not template):
        return RAW
    if not template:
        raise ValueError("generation.prompt_format chat: this tokenizer has no chat template; use raw (or auto)")
    if not isinstance(template, str):  # a dict of named templates: the default one
        template = template.get("default") or next(iter(template.values()))
    if example:
        return PromptFormat("chat", system, template, EXAMPLE, REMINDER)
    return PromptFormat("chat", system, template)
