"""Which of this node's own groups a step trains on: with ``swarm.replace_uninformative``, a group
whose rewards are all equal (every GRPO advantage 0: it teaches nothing) is left out, and in a
swarm replaced by one more informative peer group when the pool has one.

DAPO's dynamic sampling generates more until a batch holds only informative groups; here the
swarm's generation pays instead. The batch never grows: a step asks the exchange for its J peer
groups plus at most one informative replacement per dropped own group, within the same per-sender
cap ⌈J × max_sender_share⌉ (computed on J, not on the enlarged count, so a replacement cannot
lift what one sender may supply; node/swarm/selection.py). An own group the pool cannot replace
is dropped anyway, as alone (no swarm, or J = 0: DAPO's filter without resampling, fewer rows that
step), so the solo baseline and the swarm filter their own groups alike. Off, nothing is dropped
and the counts are still recorded.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Sequence

from swarm_node.node.run.rollouts import Rollout
from swarm_node.policies.learner import TrainSample

if TYPE_CHECKING:
    from swarm_node.node.swarm.exchange import SwarmExchange
    from swarm_node.node.swarm.pool import AdmittedGroup

__all__ = ["OwnGroups", "FamilyCorrectness", "uninformative_groups", "own_groups", "take_replacing"]


@dataclass(frozen=True)
class OwnGroups:
    """What a step does with its own groups: the ones it leaves out (by task id, the learner's
    group of a local sample), how many were uninformative and how many peer groups replaced them."""

    drop: frozenset[str]
    uninformative: int
    replaced: int

    def keep(self, samples: list[TrainSample]) -> list[TrainSample]:
        return [s for s in samples if s.group not in self.drop]

    def metrics(self, groups: Sequence[AdmittedGroup] | None) -> dict:
        """The step's record fields (docs/metrics.md)."""
        out = {"own_uninformative": self.uninformative, "own_replaced": self.replaced}
        if groups is not None:
            out["informative_taken"] = sum(g.informative for g in groups)
        return out


@dataclass
class FamilyCorrectness:
    """This node's running correctness per task family, from its own groups: what the ``weakest``
    selection rule (node/swarm/selection.py) reads as what it is worst at. An exponential mean,
    ``decay`` a step; not checkpointed (a resumed node reads it afresh within a few steps)."""

    decay: float = 0.9
    values: dict[str, float] = field(default_factory=dict)

    def update(self, rollouts: Sequence[Rollout]) -> dict[str, float]:
        """Fold in one step's own rollouts; returns the readings now (family -> correctness)."""
        by_family: dict[str, list[float]] = {}
        for r in rollouts:
            by_family.setdefault(r.task_id.family, []).append(r.reward.correctness)
        for family, values in by_family.items():
            mean, old = sum(values) / len(values), self.values.get(family)
            self.values[family] = mean if old is None else self.decay * old + (1 - self.decay) * mean
        return dict(self.values)


def uninformative_groups(rollouts: Sequence[Rollout]) -> list[str]:
    """Task ids of the groups whose rewards are all equal, in the order generated."""
    rewards: dict[str, set[float]] = {}
    for r in rollouts:
        rewards.setdefault(str(r.task_id), set()).add(r.reward.total)
    return [t for t, values in rewards.items() if len(values) == 1]


def own_groups(rollouts: Sequence[Rollout], enabled: bool, replaced: int = 0) -> OwnGroups:
    """Alone (or with no peer groups to ask for): every uninformative own group is dropped when
    ``enabled``; ``replaced`` of them were replaced by peer groups."""
    flat = uninformative_groups(rollouts)
    return OwnGroups(frozenset(flat) if enabled else frozenset(), len(flat), replaced)


def take_replacing(swarm: SwarmExchange, rollouts: Sequence[Rollout], j: int, current: int,
                   enabled: bool, families: FamilyCorrectness | None = None
                   ) -> tuple[list[AdmittedGroup], OwnGroups]:
    """The step's peer groups and what happens to its own: J groups as the exchange's rule picks
    them, plus, when ``enabled`` and J > 0, up to one informative peer group per uninformative own
    group (never more than that many extra: I + J does not grow). ``families``, updated with this
    step's rollouts, is what the ``weakest`` rule reads."""
    own = own_groups(rollouts, enabled)  # dropped only when enabled: then one replacement each
    weakness = families.update(rollouts) if families is not None else None
    groups = swarm.take(j, current, extra=len(own.drop) if j > 0 else 0, weakness=weakness)
    return groups, replace(own, replaced=max(0, len(groups) - j))
