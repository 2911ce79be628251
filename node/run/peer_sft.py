"""Which peer rows enter the learner's supervised term (``learner.peer_sft_coef``; the term itself
is policies/supervised.py, the reasons docs/algorithm.md section 11): a peer's completion this node
verified and that is exactly the canonical completion of its task in this node's tokens, of a kind
of question this node gets all wrong, within a per-step and a per-sender cap.

**Verified** is ``TrainSample.verified``, the verdict node/run/rollouts.py took from this node's
own scoring (right, and nothing but one answer block: ``Reward.verified``), the same rows the
success floor may lift. Nothing a peer claims decides it.

**Canonical.** Verified is not enough for imitation: the reward reads the block's content through
the family's normalization and allows whitespace around the block, so text that does not change the
reward would be learned token by token (120 newlines before the block and 60 " \n" after it put 97%
of such a row's mean-NLL weight on padding, and padding after ``</answer>`` teaches the node not to
stop; ``<answer>   +0002   </answer>`` and ``<answer>[[[((5,,,,))]]]</answer>`` are right and
verified). A row enters only if its token ids are exactly ``Target.ids``: this node's own
encoding (``Policy.encode_completion``, EOS appended) of ``format_answer(task.answer)``, the one
completion the warm start teaches for the task (rewards/answer.py, rewards/corpus.py). So its
block is the canonical form of its content, nothing but EOS follows ``</answer>``, nothing
precedes ``<answer>``, and the peer chooses neither the tokenization nor any text: what it sends
and what this node would write for a right answer are the same ids. A verified row can have no
text before the block but whitespace (``is_well_formed``), so no reasoning trace is lost here;
a right answer the family accepts in another spelling (a task source's other right answers) is
left out, which costs the term rows, never safety.

**Got all wrong, by kind.** Nodes draw their own questions: a swarm node's task seed holds its peer
id (``TrainingNode._task_seed``), so a peer's task id is never one of this node's, and the same
*question* comes up under both only where a level asks few (boolean level 1 has 10 questions,
counting level 2 about 370). Drawn as the nodes draw them, 2 nodes, 4 own groups a step, 200
steps: a peer's group asks a question this node asked in the same step for 6% of groups at the
default level 1, 2% at the skill study's level-2 counting and boolean, 1% at levels 1-3; within
its last 8 steps 26%, 13% and 3%. Question by question, the term would rarely fire, and only
where questions repeat. So the unit is the question's kind, its (family, level): a kind *fails*
when, in each of the last ``FAIL_WINDOW`` steps that drew it, none of this node's own groups of
that kind had a right completion (correctness 1; a near miss of a partial-credit source is not
right). Steps, not groups: a step's groups of a kind are one verdict, so a step whose last two
groups of it were all wrong but whose first ones were right does not fail it. It is a node that
lacks the skill, not one that missed a question by luck: a kind it solves 20% of the time fails
two steps of one group of 8 running with probability 0.8^16 ≈ 3% (less with more groups a step),
one it never solves always. A kind this node has not generated does not fail (a peer cannot
send a level or family this node never draws into the term), and only this node's own rollouts update the record: nothing a peer sends moves it.
``FailingKinds`` is not checkpointed: a resumed node reads it afresh within a few steps.

**Caps.** At most ``max_rows`` rows a step (``learner.peer_sft_rows``, R) and ⌈R × share⌉ from one
sender (``swarm.max_sender_share``, the exchange's share, by its ``sender_cap`` and
``round_robin``: node/swarm/selection.py), computed on R, never on the rows offered, so a sender
that offers more does not raise its own cap. Senders with standing here (``PeerWork.proven``:
this node trained on their groups, with a gradient, in 2 distinct rounds of its own) come first,
taking turns one row each, then the rest the same way for the rows left, each in the order their
rows come in the batch; within a sender its groups take turns, so its rows cover as many questions
as they can. Keys are free, so a burst of fresh keys can take only the rows proven senders leave;
a Sybil that sends informative groups for 2 rounds has standing too, so this orders, it does not
exclude. The loss divides by R, not by the rows chosen (policies/supervised.py), and a step whose
only gradient is the term runs at min(1, coef) × rows / R of the learning rate (``lr_scale``): one
sender's rows weigh at most ⌈R × share⌉ / R of the term.
"""

from __future__ import annotations

import collections
import dataclasses
from dataclasses import dataclass, field
from typing import Callable, Iterable, Mapping, Sequence

from swarm_node.node.run.rollouts import Rollout
from swarm_node.node.swarm.pool import AdmittedGroup
from swarm_node.node.swarm.selection import round_robin, sender_cap
from swarm_node.policies.learner import TrainSample, sample_source
from swarm_node.protocol.task_id import TaskId
from swarm_node.rewards.answer import format_answer

__all__ = ["FAIL_WINDOW", "FailingKinds", "SupervisedRows", "Target", "choose_supervised", "failing_kinds", "targets"]

# Steps that drew a kind and must all have got it wrong: two steps of at least one group of G = 8
# are 16 completions or more, enough to tell a kind this node cannot do from a question it happened
# to miss, few enough to follow a node that learns (one right completion and the kind stops failing
# until two more steps that draw it get it all wrong).
FAIL_WINDOW = 2

Kind = tuple[str, int]  # (family, level)


@dataclass
class FailingKinds:
    """The kinds of question this node gets all wrong: per (family, level), whether each of its last
    ``window`` steps that drew that kind had no right completion in any of its own groups of it.
    The unit is the step, not the group: a step of six groups of a kind, four with a right
    completion, does not fail the kind because its last two groups were all wrong. Bounded by the
    kinds this node's own config draws."""

    window: int = FAIL_WINDOW
    recent: dict[Kind, collections.deque] = field(default_factory=dict)

    def update(self, rollouts: Sequence[Rollout]) -> None:
        """Fold in one step's own rollouts (every group, trained on or not): one verdict per kind the
        step drew, all wrong or not."""
        all_wrong: dict[Kind, bool] = {}
        for r in rollouts:
            kind = (r.task_id.family, r.task_id.difficulty)
            all_wrong[kind] = all_wrong.get(kind, True) and r.reward.correctness < 1.0
        for kind, wrong in all_wrong.items():
            self.recent.setdefault(kind, collections.deque(maxlen=self.window)).append(wrong)

    def fails(self, task_id: TaskId) -> bool:
        """True when ``window`` steps have drawn ``task_id``'s kind and the last ``window`` of them
        had no right completion of it."""
        seen = self.recent.get((task_id.family, task_id.difficulty))
        return bool(seen) and len(seen) == self.window and all(seen)

    def failing(self) -> int:
        """How many kinds fail now."""
        return sum(len(s) == self.window and all(s) for s in self.recent.values())


def failing_kinds(coef: float, learns: bool) -> FailingKinds | None:
    """The record a node keeps for the term: one where the term is on (``coef`` > 0) and the node
    learns; None otherwise, and then no row is chosen and no ``peer_sft_*`` key is recorded. A
    worker (``broadcast.role worker``, node/run/roles.py) never steps and takes no peer group:
    choosing rows there would count what nothing trains on."""
    return FailingKinds() if coef > 0 and learns else None


@dataclass(frozen=True)
class Target:
    """What a peer group's rows are held to: its task, and the one completion the term imitates for
    it, in this node's tokens."""

    task: TaskId
    ids: tuple[int, ...]  # encode(format_answer(task.answer)), EOS included


def targets(groups: Iterable[AdmittedGroup], encode: Callable[[str], Sequence[int]]) -> dict[str, Target]:
    """Each peer group's ``Target`` by its key (the rows' ``TrainSample.group``); ``encode`` is this
    node's completion encoder (``Policy.encode_completion``)."""
    return {g.key: Target(g.task.id, tuple(encode(format_answer(g.task.answer)))) for g in groups}


@dataclass(frozen=True)
class SupervisedRows:
    """A step's batch with the chosen rows marked ``supervised``, and the counts behind the choice."""

    samples: list[TrainSample]
    verified: int  # peers' rows this node verified
    canonical: int  # of those, exactly their task's canonical completion in this node's tokens
    eligible: int  # of those, of a kind this node fails
    chosen: int  # of those, within the caps: the rows marked

    def metrics(self, failing: int) -> dict[str, int]:
        """The step's record fields (docs/metrics.md); ``failing``: the kinds failing now."""
        return {"peer_sft_verified": self.verified, "peer_sft_canonical": self.canonical,
                "peer_sft_eligible": self.eligible,
                "peer_sft_capped": self.eligible - self.chosen, "peer_sft_failing_kinds": failing}


def choose_supervised(samples: list[TrainSample], target_of: Mapping[str, Target], fails: Callable[[TaskId], bool],
                      max_rows: int, max_sender_share: float,
                      standing: Callable[[str], bool] = lambda sender: False) -> SupervisedRows:
    """Mark the rows of ``samples`` the supervised term takes: a peer's (not local) verified row
    whose ids are its group's target's (``target_of`` its group, the peer group's key: ``targets``)
    and whose task is of a kind that ``fails``, at most ``max_rows`` in all and
    ``sender_cap(max_rows, max_sender_share)`` from one sender. Senders with ``standing`` (the
    exchange's ``PeerWork.proven``) fill the rows first, taking turns; the others then take turns
    for what is left, each in batch order."""
    verified = [i for i, s in enumerate(samples) if not s.local and s.verified]
    canonical = [i for i in verified if samples[i].group in target_of
                 and tuple(samples[i].completion_ids) == target_of[samples[i].group].ids]
    eligible = [i for i in canonical if fails(target_of[samples[i].group].task)]
    # Each sender's queue: its groups in turn (the first row of each, then the second...).
    by_group: dict[str, dict[str, list[int]]] = collections.defaultdict(dict)
    for i in eligible:
        by_group[sample_source(samples[i])].setdefault(samples[i].group, []).append(i)
    queues = {sender: _interleaved(list(groups.values())) for sender, groups in by_group.items()}
    used, cap = collections.Counter(), sender_cap(max_rows, max_sender_share)
    proven = [s for s in queues if standing(s)]
    picked = round_robin(queues, proven, max_rows, used, cap)
    picked += round_robin(queues, [s for s in queues if s not in proven], max_rows - len(picked), used, cap)
    marked = set(picked)
    out = [dataclasses.replace(s, supervised=True) if i in marked else s for i, s in enumerate(samples)]
    return SupervisedRows(out, len(verified), len(canonical), len(eligible), len(marked))


def _interleaved(groups: list[list[int]]) -> list[int]:
    """[[a0, a1], [b0]] -> [a0, b0, a1]."""
    longest = max((len(g) for g in groups), default=0)
    return [g[k] for k in range(longest) for g in groups if k < len(g)]
