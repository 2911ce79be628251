"""The ``[tasks]`` section of a node's configuration: which families it samples (built-in ones and
task sources: rewards/sources.py), at which levels, and the format bonus.

Checking it loads each task source (a bad file stops the start, naming it) and settles the family
names the node uses for its whole run (``names``).
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field, PrivateAttr, field_validator, model_validator

from swarm_node.node.config.config_section import Section as _Section

__all__ = ["TasksConfig"]


class TasksConfig(_Section):
    families: list[str] = Field(["arithmetic", "lists", "base", "boolean", "counting"], description="task families to sample: built-in names, module:PKG.MOD or module:FILE.py (your own family), jsonl:FILE.jsonl (a dataset), rg:DATASET[:{json config}] or rg:rl-swarm (reasoning-gym); docs/tasks.md")
    difficulties: list[int] = Field([1], description="difficulty levels to sample (1 = easiest; the embedded default model learns level 1 in minutes, level 2+ is mostly beyond it)")
    format_weight: float = Field(0.1, ge=0, description="reward for a well-formed <answer>...</answer> completion")
    answer: Literal["auto", "tags", "lenient"] = Field("auto", description="where a completion's answer is read: tags (the <answer> block only), lenient (the block, else a final \\boxed{}, else the last number for a task whose answer is a number: what a small instruct model writes) or auto (lenient for chat prompts, tags for raw ones); the format bonus goes to the block either way (docs/tasks.md)")

    @field_validator("families")
    @classmethod
    def _known_families(cls, v: list[str]) -> list[str]:
        from swarm_node.rewards.registry import BUILT_IN, resolve_families  # light: no torch
        from swarm_node.rewards.sources import is_source_spec

        if not v:
            raise ValueError(f"no task family chosen: name at least one of {', '.join(BUILT_IN)}")
        unknown = [f for f in v if f not in BUILT_IN and not is_source_spec(f)]
        if unknown:
            raise ValueError(f"unknown task families {unknown}; choose from {', '.join(BUILT_IN)}, "
                             f"or name a source: module:PKG.MOD, module:FILE.py, jsonl:FILE.jsonl, rg:DATASET (docs/tasks.md)")
        from swarm_node.rewards.errors import TaskError

        try:
            resolve_families(v)  # loads and checks each source now: a bad file stops the start, naming it
        except TaskError as e:
            raise ValueError(str(e)) from None
        return v

    _names: tuple[str, ...] = PrivateAttr(default=())

    @property
    def names(self) -> list[str]:
        """The family names the entries mean (a source's is ``<name>_<digest>``, rewards/sources.py),
        settled when the config was checked: a dataset edited during the run does not rename its
        family under the running node (its held-out set and its peers' ids stay the ones it has)."""
        from swarm_node.rewards.registry import get_family, resolve_families
        from swarm_node.rewards.errors import TaskError

        try:
            [get_family(n) for n in self._names]
        except TaskError:  # this process forgot its sources (tests do, between tests): load them again
            self._names = ()
        if not self._names:
            self._names = tuple(resolve_families(self.families))
        return list(self._names)

    @model_validator(mode="after")
    def _difficulties_exist(self) -> "TasksConfig":
        from swarm_node.rewards.registry import get_family

        top = min(get_family(f).max_difficulty for f in self.names)
        if not self.difficulties or any(not 1 <= d <= top for d in self.difficulties):
            raise ValueError(f"difficulties {self.difficulties}: each must be in 1..{top} "
                             f"(the highest level every selected family has)")
        return self

    def reward_config(self, prompt_kind: str):
        """How this node scores a completion (its own and its peers'), given its prompt format's
        kind ("raw" or "chat"): the one place ``answer``'s auto is decided."""
        from swarm_node.rewards.scoring import RewardConfig

        answer = self.answer if self.answer != "auto" else ("lenient" if prompt_kind == "chat" else "tags")
        return RewardConfig(format_weight=self.format_weight, answer=answer)
