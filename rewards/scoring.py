"""Verifiable rewards: score a completion against a task's regenerated ground truth.

Reward = correctness (1 if the extracted answer matches after the family's normalization, or a
task source's own score in [0, 1], which may give partial credit: rewards/rg_source.py)
+ format (``format_weight`` if the completion is exactly one answer block). The format term
is small so that it shapes early training without ever outweighing a correct answer.

``RewardConfig.answer`` says where the answer is read: ``tags`` (the block only) or ``lenient``
(the block, else a final ``\\boxed{}``, else the last number for a numeric task:
rewards/answer.py says why); the format term goes to the block alone either way.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field

from swarm_node.rewards.answer import extract_answer, extract_lenient, is_number, is_well_formed
from swarm_node.rewards.errors import InvalidRewardConfig, TaskError
from swarm_node.rewards.registry import BUILT_IN, get_family
from swarm_node.rewards.task import Task

__all__ = ["ANSWER_READINGS", "Reward", "RewardConfig", "score", "score_batch"]

ANSWER_READINGS = ("tags", "lenient")


@dataclass(frozen=True)
class Reward:
    """The two reward terms of one completion, and whether it was exactly one answer block."""

    correctness: float
    format: float
    well_formed: bool = False  # kept apart from ``format``, which is 0 for everyone when format_weight is 0
    # An answer could be read (the block, or a lenient reading): a diagnostic (the "answered" rate),
    # not a reward term, so two rewards that pay the same compare equal.
    answered: bool = field(default=False, compare=False)

    @property
    def total(self) -> float:
        return self.correctness + self.format

    @property
    def verified(self) -> bool:
        """Right, and nothing but one answer block: the best a completion can score (the rows
        ``learner.external_success_floor`` may lift, docs/algorithm.md section 10)."""
        return self.correctness == 1.0 and self.well_formed


@dataclass(frozen=True)
class RewardConfig:
    """Reward shaping: ``format_weight`` (finite, >= 0) is the bonus for a well-formed answer;
    ``answer`` is where the answer is read (``tags`` or ``lenient``)."""

    format_weight: float = 0.1
    answer: str = "tags"

    def __post_init__(self) -> None:
        if self.answer not in ANSWER_READINGS:
            raise InvalidRewardConfig(f"answer must be one of {', '.join(ANSWER_READINGS)}, got {self.answer!r}")
        weight = self.format_weight
        if isinstance(weight, bool) or not isinstance(weight, (int, float)):
            raise InvalidRewardConfig(f"format_weight must be a number, got {weight!r}")
        if not math.isfinite(weight) or weight < 0:
            raise InvalidRewardConfig(
                f"format_weight must be a finite number >= 0, got {weight!r}"
            )


_DEFAULT_CONFIG = RewardConfig()


def score(task: Task, completion: str, cfg: RewardConfig = _DEFAULT_CONFIG) -> Reward:
    """Reward of ``completion`` (the model's text after the prompt) for ``task``."""
    family = get_family(task.id.family)
    if cfg.answer == "lenient":  # "where the task allows": the last number only for a numeric answer
        extracted = extract_lenient(completion, numeric=is_number(task.answer))
    else:
        extracted = extract_answer(completion)
    correctness = 0.0 if extracted is None else _correctness(family, extracted, task)
    well_formed = is_well_formed(completion)
    return Reward(
        correctness=correctness,
        format=float(cfg.format_weight) if well_formed else 0.0,
        well_formed=well_formed,
        answered=extracted is not None,
    )


def _correctness(family, extracted: str, task: Task) -> float:
    """1 or 0 by the family's comparison, or a source's own score clipped to [0, 1] (partial
    credit); a user's normalizer or scorer (rewards/sources.py) that raises on a model's answer
    scores it 0, and on the ground truth is the task's error, never the node's crash."""
    if family.name in BUILT_IN:
        return 1.0 if family.normalize(extracted) == family.normalize(task.answer) else 0.0
    if family.scorer is not None:
        try:
            value = float(family.scorer(extracted, task))
        except Exception:  # noqa: BLE001 - the model's text is anything
            return 0.0
        return min(1.0, max(0.0, value)) if math.isfinite(value) else 0.0
    try:
        truth = family.normalize(task.answer)
    except Exception as e:  # noqa: BLE001
        raise TaskError(f"family {family.name!r}'s scorer failed on the answer of {task.id}: "
                        f"{type(e).__name__}: {e}") from e
    try:
        return 1.0 if family.normalize(extracted) == truth else 0.0
    except Exception:  # noqa: BLE001 - the model's text is anything: not an answer it can read
        return 0.0


def score_batch(
    tasks: Sequence[Task], completions: Sequence[str], cfg: RewardConfig = _DEFAULT_CONFIG
) -> list[Reward]:
    """``score`` over paired sequences of equal length."""
    if len(tasks) != len(completions):
        raise TaskError(
            f"score_batch needs one completion per task: got {len(tasks)} tasks"
            f" and {len(completions)} completions"
        )
    return [score(task, completion, cfg) for task, completion in zip(tasks, completions)]
