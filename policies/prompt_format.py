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

from rewards.task import PROMPT_TEMPLATE

__all__ = ["PromptFormat", "RAW", "DEFAULT_SYSTEM", "choose_format"]

DEFAULT_SYSTEM = ("Solve the task. Give your final answer between <answer> and </answer>, "
                  "for example <answer>42</answer>, and nothing after it.")


@dataclass(frozen=True)
class PromptFormat:
    """``raw`` (swarm-node's template) or ``chat`` (the tokenizer's chat template, ``system`` first)."""

    kind: str = "raw"
    system: str = ""
    template: str = ""  # the chat template's source: two models' templates can differ

    def text(self, tokenizer, question: str) -> str:
        """The prompt text for ``question`` (tokenized with no added special tokens: a chat
        template writes its own)."""
        if self.kind == "raw":
            return PROMPT_TEMPLATE.format(question=question)
        messages = ([{"role": "system", "content": self.system}] if self.system else []) + [
            {"role": "user", "content": question}]
        return tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)

    def fingerprint(self, tokenizer_fp: str) -> str:
        """What a rollout's ``tokenizer_fingerprint`` says: the tokenizer's alone for raw, else a
        digest of it with the template and the system message."""
        if self.kind == "raw":
            return tokenizer_fp
        blob = "\x00".join((tokenizer_fp, "chat", self.template, self.system)).encode()
        return hashlib.sha256(blob).hexdigest()[:16]

    def describe(self) -> str:
        return "raw (Q: ...\\nA: )" if self.kind == "raw" else "the model's chat template, with a system message"


RAW = PromptFormat()


def choose_format(tokenizer, mode: str = "auto", system: str = DEFAULT_SYSTEM) -> PromptFormat:
    """``auto``: the chat template when the tokenizer has one, else raw; ``chat`` insists."""
    template = getattr(tokenizer, "chat_template", None) or ""
    if mode == "raw" or (mode == "auto" and not template):
        return RAW
    if not template:
        raise ValueError("generation.prompt_format chat: this tokenizer has no chat template; use raw (or auto)")
    if not isinstance(template, str):  # a dict of named templates: the default one
        template = template.get("default") or next(iter(template.values()))
    return PromptFormat("chat", system, template)
