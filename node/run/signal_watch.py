"""Whether a run has anything to learn, said to the user: a warning, once, when step after step
every group's rewards are all equal, with the likely cause read from those steps' own metrics;
and, with ``run.log_samples N``, N of each step's own completions in the log to look at.

GRPO learns from the differences within a group: a group whose completions all score the same
has advantage 0 everywhere and no gradient (``zero_adv_frac`` 1.0 in the record). A run in that
state for good (a model that never writes the answer format, completions cut at the length limit
before they answer, tasks far too easy or too hard) trains for hours and moves nothing, while its
log looks like any other run's.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import TYPE_CHECKING

from swarm_node.rewards.registry import make_task

if TYPE_CHECKING:
    from swarm_node.node.observe.status import StatusFile
    from swarm_node.node.run.rollouts import Rollout

log = logging.getLogger(__name__)

__all__ = ["SignalWatch", "is_flat", "likely_cause", "sample_lines", "FLAT_STEPS"]

# Consecutive steps with nothing to learn before the warning: a hard batch of a few groups is
# flat now and then by chance (and a run's first steps may be, before the model finds the format);
# five in a row is the run's state, and still only seconds to minutes into it.
FLAT_STEPS = 5
TRUNCATED_SHARE = 0.5  # completions cut at the limit, at least this share: the limit is the cause
SAMPLE_CHARS = 300  # of a logged completion (its start holds the format, or its absence)


def is_flat(record: dict, rollouts: Sequence["Rollout"]) -> bool | None:
    """True when the step had nothing to learn: every trained row's advantage was 0, or (no
    update at all) every own group's rewards were equal; None when the step says nothing (no
    rollouts of its own and no update)."""
    if record.get("zero_adv_frac") is not None:
        return record["zero_adv_frac"] >= 1.0
    groups = len({r.task_id for r in rollouts})
    return record.get("own_uninformative", 0) >= groups if groups else None


def likely_cause(record: dict, max_completion_length: int) -> str:
    """Why a step's own groups were all equal, from its ``format``, ``truncated`` and ``correct``,
    with what to change."""
    fmt, cut, correct = record.get("format", 0.0), record.get("truncated", 0.0), record.get("correct", 0.0)
    # Where answers are read leniently (tasks.answer), an answer is read without the format:
    # "answered" says whether any was; the format alone is no cause then.
    unread = record["answered"] == 0 if "answered" in record else fmt == 0
    causes = []
    if cut >= TRUNCATED_SHARE:
        causes.append(f"{cut:.0%} of the completions were cut at generation.max_completion_length "
                      f"({max_completion_length} tokens) before they ended: raise it")
    if unread:
        causes.append("no answer could be read from any completion (answered 0, format 0): look at what the model "
                      "writes (--run.log_samples 4) and say the format in generation.system_prompt (chat "
                      "prompts), or warm-start the model on it")
    if causes:
        return "; ".join(causes)
    if correct >= 1.0:
        return "every completion is correct: the tasks are too easy for this model (raise tasks.difficulties)"
    if correct <= 0.0:
        return ("every completion is wrong: the tasks are too hard for this model (lower tasks.difficulties, "
                "or start from a stronger model)")
    return ("within each group the completions score alike: sample more varied ones (raise "
            "generation.temperature or generation.num_generations)")


def sample_lines(rollouts: Sequence["Rollout"], n: int) -> list[str]:
    """``n`` of a step's completions, one per group first (spread over the step), each as one
    line: its question, its reward and the start of its text."""
    if n <= 0 or not rollouts:
        return []
    stride = max(1, len(rollouts) // n)
    picked = list(rollouts[::stride])[:n]
    lines = []
    for i, r in enumerate(picked, 1):
        text = r.completion.text
        shown = text[:SAMPLE_CHARS] + (f"... ({len(text)} chars)" if len(text) > SAMPLE_CHARS else "")
        lines.append(f"sample {i}/{len(picked)} ({r.task_id.family}, reward {r.reward.total:.2f}"
                     f"{', cut at the limit' if r.completion.truncated else ''}): "
                     f"question {make_task(r.task_id).question!r} -> {shown!r}")
    return lines


class SignalWatch:
    """A node's watch over its steps' learning signal: ``after_step`` each step, from the trainer."""

    def __init__(self, log_samples: int, max_completion_length: int, status: "StatusFile | None" = None):
        self.log_samples, self.max_len, self.status = log_samples, max_completion_length, status
        self.flat_steps = 0  # consecutive steps with nothing to learn
        self.warned = False

    def after_step(self, record: dict, rollouts: Sequence["Rollout"]) -> None:
        """Log the step's samples (``run.log_samples``); warn once after ``FLAT_STEPS`` flat steps."""
        for line in sample_lines(rollouts, self.log_samples):
            log.info("step %d %s", record.get("step", 0), line)
        flat = is_flat(record, rollouts)
        if flat is None:
            return
        self.flat_steps = self.flat_steps + 1 if flat else 0
        if self.warned or self.flat_steps < FLAT_STEPS:
            return
        self.warned = True
        cause = likely_cause(record, self.max_len)
        log.warning("nothing to learn for %d steps in a row: every group's rewards are all equal (zero advantage, "
                    "no gradient). Likely cause: %s", self.flat_steps, cause)
        if self.status is not None:  # the simulator's table shows a node's note; another note stays
            self.status.extra.setdefault("note", f"nothing to learn: {cause.split(':')[0]}")
