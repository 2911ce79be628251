"""The ``[eval]`` section of a node's configuration: when and how much held-out evaluation runs.

Its flags are ``--eval.every`` and so on, like every section's (node/config/config.py); what the
evaluation does is node/evaluate/evaluate.py's.
"""

from __future__ import annotations

from typing import Any, Optional

from pydantic import Field, field_validator, model_validator

from swarm_node.node.config.config_section import Section, none_words

__all__ = ["EvalConfig"]


class EvalConfig(Section):
    every: int = Field(50, ge=0, description="evaluate on the held-out tasks every this many steps (0 = off; docs/running.md): greedy and sampled pass@1 per family on fixed task ids from a seed space training never draws")
    at_start: bool = Field(True, description="also evaluate before the first step of a run that starts from scratch and evaluates at all (eval.every or eval.at_end), kept in RUN/eval/step_0.json: the point every later evaluation is compared with")
    at_end: bool = Field(True, description="also evaluate after the last step of a run that completes its steps")
    tasks_per_family: int = Field(16, ge=1, le=1024, description="held-out tasks per family (the same ids on every node and at every evaluation)")
    samples: int = Field(4, ge=0, description="sampled completions per task, at generation.temperature, for sampled pass@1 (0 = none)")
    greedy: bool = Field(True, description="also one greedy completion per task, for greedy pass@1")
    pass_k: int = Field(0, ge=0, description="also the unbiased pass@k estimate from the samples for this k (0 = off; at most eval.samples)")
    max_completion_length: Optional[int] = Field(None, ge=1, description="maximum new tokens of an evaluation completion; none = generation.max_completion_length")

    @field_validator("max_completion_length", mode="before")
    @classmethod
    def _nullable(cls, v: Any) -> Any:
        return none_words(v)

    @model_validator(mode="after")
    def _something_to_measure(self) -> "EvalConfig":
        if self.pass_k > self.samples:
            raise ValueError(f"eval.pass_k ({self.pass_k}) must be at most eval.samples ({self.samples}): "
                             f"pass@k is estimated from the samples")
        if not self.greedy and not self.samples:
            raise ValueError("eval.greedy false and eval.samples 0 leave nothing to measure; "
                             "to turn evaluation off, set eval.every 0 and eval.at_end false")
        return self
