"""Which peer rows enter the supervised term (node/run/peer_sft.py): kinds this node gets all wrong,
verified peer rows that are exactly their task's canonical completion in this node's tokens, at most
R a step and ⌈R × share⌉ from one sender, whatever a sender offers."""

from __future__ import annotations

import collections

from swarm_node.node.run.peer_sft import FailingKinds, Target, choose_supervised, failing_kinds
from swarm_node.node.run.roles import make_role
from swarm_node.node.run.rollouts import Rollout
from swarm_node.policies.learner import TrainSample
from swarm_node.protocol.task_id import TaskId
from swarm_node.rewards.scoring import Reward

COUNT2 = TaskId("counting", 7, 2)  # a kind this node fails below: (counting, 2)
BOOL2 = TaskId("boolean", 8, 2)  # a kind it does not fail
LISTS1 = TaskId("lists", 9, 1)  # a kind it never drew


def own(*groups: tuple[str, int, tuple[float, ...]]) -> list[Rollout]:
    """One own group per argument: (family, level, its completions' correctness)."""
    out = []
    for k, (family, level, correct) in enumerate(groups):
        tid = TaskId(family, 100 + k, level)
        out += [Rollout(tid, None, 0, Reward(c, 0.1, well_formed=True)) for c in correct]
    return out


def failing() -> FailingKinds:
    kinds = FailingKinds(window=2)
    kinds.update(own(("counting", 2, (0, 0, 0)), ("boolean", 2, (0, 0, 0))))
    kinds.update(own(("counting", 2, (0, 0.5, 0)), ("boolean", 2, (0, 1, 0))))  # a near miss is not right
    return kinds


def test_a_kind_fails_when_its_last_window_steps_had_no_right_completion():
    kinds = failing()
    assert kinds.fails(COUNT2) and kinds.fails(TaskId("counting", 12345, 2))  # any question of the kind
    assert not kinds.fails(BOOL2)  # one right completion in its last 2 steps
    assert not kinds.fails(LISTS1) and not kinds.fails(TaskId("counting", 7, 1))  # never drawn here
    assert kinds.failing() == 1
    # one all-wrong step is not yet 2; then the window slides: a right completion clears the kind...
    fresh = FailingKinds(window=2)
    fresh.update(own(("counting", 2, (0, 0))))
    assert not fresh.fails(COUNT2)
    fresh.update(own(("counting", 2, (0, 0))))
    assert fresh.fails(COUNT2)
    fresh.update(own(("counting", 2, (1, 0))))
    assert not fresh.fails(COUNT2)
    # ...until the last 2 steps that drew it are all wrong again (the right one has left the window)
    fresh.update(own(("counting", 2, (0, 0)), ("counting", 2, (0, 0))))
    assert not fresh.fails(COUNT2)  # two all-wrong groups of one step are one step
    fresh.update(own(("boolean", 2, (1, 1))))  # a step that does not draw the kind leaves it as it was
    assert not fresh.fails(COUNT2)
    fresh.update(own(("counting", 2, (0, 0))))
    assert fresh.fails(COUNT2)


def test_a_step_counts_once_whatever_the_order_of_its_groups():
    """The reviewer's case: six own groups of a kind in one step, the first four with a right
    completion and the last two all wrong. Counting groups, the last two made the kind fail; one
    verdict a step, it does not, the next step of all-wrong groups neither, and only a second such
    step makes it fail."""
    step = own(*[("counting", 2, (1, 0, 0, 0, 0, 0, 0, 0))] * 4, *[("counting", 2, (0,) * 8)] * 2)
    kinds = FailingKinds(window=2)
    kinds.update(step)
    assert not kinds.fails(COUNT2)
    kinds.update(step)  # the same again: still no step without a right completion
    assert not kinds.fails(COUNT2) and kinds.failing() == 0
    kinds.update(own(*[("counting", 2, (0,) * 8)] * 6))
    assert not kinds.fails(COUNT2)  # one step all wrong
    kinds.update(own(("counting", 2, (0,) * 8)))
    assert kinds.fails(COUNT2)  # two


CANON = (2, 3, 0)  # the canonical completion's ids, as this node encodes it (any task here)


def row(sender: str | None, task: TaskId, k: int, *, verified: bool = True, round_: int = 5,
        ids: tuple[int, ...] = CANON) -> TrainSample:
    """A row, told apart from the others by ``policy_version`` = k."""
    group = f"{sender}/{round_}/{task}" if sender else str(task)
    return TrainSample(group=group, prompt_ids=(1,), completion_ids=ids, behaviour_logprobs=(-1.0,) * len(ids),
                       behaviour_seq_logprob=-2.0, reward=1.1 if verified else 0.1, policy_version=k,
                       local=sender is None, source=sender, verified=verified)


def tasks_of(samples):
    return {s.group: Target(TaskId.parse(s.group.rsplit("/", 1)[-1]), CANON) for s in samples if not s.local}


def chosen(out) -> list[TrainSample]:
    return [s for s in out.samples if s.supervised]


def test_only_a_peers_verified_row_of_a_failing_kind_enters():
    samples = [row(None, COUNT2, 0),  # this node's own row: never
               row("sn1a", COUNT2, 1),  # the one that enters
               row("sn1a", COUNT2, 2, verified=False),  # wrong, or right but not one answer block: never
               row("sn1a", COUNT2, 5, ids=(2, 2, 3, 0)),  # verified, but not the canonical ids: never
               row("sn1b", BOOL2, 3),  # verified, but a kind this node does not get all wrong: never
               row("sn1b", LISTS1, 4)]  # verified, a kind this node never drew: never
    out = choose_supervised(samples, tasks_of(samples), failing().fails, max_rows=8, max_sender_share=0.5)
    assert [s.policy_version for s in chosen(out)] == [1]
    assert (out.verified, out.canonical, out.eligible, out.chosen) == (4, 3, 1, 1)
    assert out.metrics(1) == {"peer_sft_verified": 4, "peer_sft_canonical": 3, "peer_sft_eligible": 1,
                              "peer_sft_capped": 0, "peer_sft_failing_kinds": 1}
    # the rows are the batch's, in its order, with only the flag changed
    assert [s.policy_version for s in out.samples] == [s.policy_version for s in samples]
    assert [s for s in out.samples if not s.supervised] == [s for i, s in enumerate(samples) if i != 1]


def test_a_hostile_sender_with_many_verified_rows_gets_its_share_and_no_more():
    """R = 8, share 0.5: one sender at most ⌈8 × 0.5⌉ = 4 rows, whatever it offers (24 here, three
    groups of 8 right answers); the honest sender's one row still enters. Alone, it still gets 4:
    the cap is computed on R, never on the rows offered, and the loss divides by R, so its rows
    weigh at most 4/8 of the term."""
    hostile = [row("sn1h", TaskId("counting", 50 + g, 2), k) for g in range(3) for k in range(8)]
    honest = [row("sn1a", COUNT2, 99)]
    samples = hostile + honest
    out = choose_supervised(samples, tasks_of(samples), failing().fails, max_rows=8, max_sender_share=0.5)
    by_sender = collections.Counter(s.source for s in chosen(out))
    assert by_sender == {"sn1h": 4, "sn1a": 1}
    assert (out.eligible, out.chosen, out.metrics(1)["peer_sft_capped"]) == (25, 5, 20)
    # its 4 rows spread over its 3 questions (groups take turns), not 4 copies of one
    assert len({s.group for s in chosen(out) if s.source == "sn1h"}) == 3
    alone = choose_supervised(hostile, tasks_of(hostile), failing().fails, max_rows=8, max_sender_share=0.5)
    assert alone.chosen == 4
    # a two-node swarm's share 1: one sender may fill R, and never more
    assert choose_supervised(hostile, tasks_of(hostile), failing().fails, 8, 1.0).chosen == 8


def test_many_senders_fill_at_most_r_rows_taking_turns():
    samples = [row(f"sn1{c}", COUNT2, k) for c in "abcde" for k in range(3)]
    out = choose_supervised(samples, tasks_of(samples), failing().fails, max_rows=4, max_sender_share=0.5)
    # R = 4, cap 2 a sender: one row each from the first four senders in batch order
    assert [s.source for s in chosen(out)] == ["sn1a", "sn1b", "sn1c", "sn1d"]


def test_nothing_is_chosen_while_no_kind_fails():
    samples = [row("sn1a", COUNT2, k) for k in range(4)]
    out = choose_supervised(samples, tasks_of(samples), FailingKinds().fails, 8, 0.5)
    assert (out.verified, out.canonical, out.eligible, out.chosen) == (4, 4, 0, 0) and not chosen(out)


def test_a_worker_keeps_no_record_and_chooses_no_row():
    """A worker never steps (and takes no peer group): with the term on it keeps no record of
    failing kinds, so the trainer chooses no row and records no peer_sft_* key there."""
    assert isinstance(failing_kinds(1.0, make_role("full").learns), FailingKinds)
    assert isinstance(failing_kinds(1.0, make_role("learner").learns), FailingKinds)
    assert failing_kinds(1.0, make_role("worker").learns) is None
    assert failing_kinds(0.0, True) is None  # off


def test_proven_senders_fill_the_rows_first():
    """R = 4, cap 2 a sender. Five fresh keys come first in the batch and would take every row; with
    two proven senders (the exchange's PeerWork.proven) after them, those take their share first and
    the fresh keys only what is left."""
    fresh = [row(f"sn1{c}", COUNT2, k) for c in "abcde" for k in range(3)]
    proven = [row(f"sn1{c}", COUNT2, 10 + k) for c in "pq" for k in range(3)]
    samples = fresh + proven
    before = choose_supervised(samples, tasks_of(samples), failing().fails, max_rows=4, max_sender_share=0.5)
    assert [s.source for s in chosen(before)] == ["sn1a", "sn1b", "sn1c", "sn1d"]  # batch order
    out = choose_supervised(samples, tasks_of(samples), failing().fails, max_rows=4, max_sender_share=0.5,
                            standing=lambda sender: sender in ("sn1p", "sn1q"))
    assert collections.Counter(s.source for s in chosen(out)) == {"sn1p": 2, "sn1q": 2}
    # one proven sender: its cap, then the fresh keys in turn for the rest
    out = choose_supervised(samples, tasks_of(samples), failing().fails, max_rows=4, max_sender_share=0.5,
                            standing=lambda sender: sender == "sn1q")
    assert collections.Counter(s.source for s in chosen(out)) == {"sn1q": 2, "sn1a": 1, "sn1b": 1}
