"""Rule b (node/run/own_groups.py): own zero-variance groups are dropped, and in a swarm replaced by
informative peer groups within the per-sender cap, so the batch never grows; alone they are only
dropped (the solo baseline's filter)."""

from __future__ import annotations

import random
from types import SimpleNamespace

from swarm_node.node.run.own_groups import FamilyCorrectness, OwnGroups, own_groups, take_replacing, uninformative_groups
from swarm_node.node.run.rollouts import Rollout
from swarm_node.node.swarm.pool import AdmittedGroup, PeerPool
from swarm_node.protocol.task_id import TaskId
from swarm_node.rewards.registry import make_task
from swarm_node.rewards.scoring import Reward

TASK = make_task("arithmetic:1:1")


def rollouts(*groups: tuple[float, ...]) -> list[Rollout]:
    """One group per argument, its completions' correctness; format always 0.1."""
    out = []
    for i, rewards in enumerate(groups):
        tid = TaskId.parse(f"arithmetic:{i + 10}:1")
        out += [Rollout(tid, None, 0, Reward(c, 0.1)) for c in rewards]
    return out


def peer(sender: str, name: str, informative: bool) -> AdmittedGroup:
    return AdmittedGroup(sender, 10, 0, "m", "t", name, (), task=TASK, token_level=True,
                         rewards=(1.1, 0.1) if informative else (0.1, 0.1))


class FakeSwarm:
    """The exchange's take over a PeerPool with the informative rule and share 0.5."""

    def __init__(self, groups):
        self.pool = PeerPool(random.Random(0))
        for g in groups:
            self.pool.add(g)

    def take(self, n, current, extra=0, weakness=None):
        self.weakness = weakness
        return self.pool.take(n, 0.5, "informative", extra, weakness)


# I = 4 own groups: two vary, two do not (all wrong, all right).
OWN = rollouts((1, 0), (0, 0), (1, 1), (0, 1))


def test_uninformative_groups_are_those_whose_rewards_all_agree():
    assert uninformative_groups(OWN) == ["arithmetic:11:1", "arithmetic:12:1"]
    assert uninformative_groups(rollouts((1, 0, 0), (0,))) == ["arithmetic:11:1"]  # one completion: no spread


def test_solo_filter_drops_them_only_when_enabled_and_counts_them_always():
    on, off = own_groups(OWN, True), own_groups(OWN, False)
    assert on == OwnGroups(frozenset({"arithmetic:11:1", "arithmetic:12:1"}), 2, 0)
    assert off == OwnGroups(frozenset(), 2, 0)
    samples = [SimpleNamespace(group=str(r.task_id)) for r in OWN]
    assert len(on.keep(samples)) == 4 and len(off.keep(samples)) == 8  # fewer rows that step
    assert on.metrics(None) == {"own_uninformative": 2, "own_replaced": 0}


def test_replacements_keep_the_batch_size_and_the_per_sender_cap():
    # J = 2, share 0.5: cap 1 a sender (computed on J). Six senders, four with an informative group.
    pool = [peer(s, s.lower(), s in "ABCF") for s in "ABCDEF"]
    groups, own = take_replacing(FakeSwarm(pool), OWN, 2, 10, True)
    assert len(groups) == 4 and own.replaced == 2 and own.uninformative == 2
    assert len({g.sender for g in groups}) == 4  # one a sender, extras included
    assert all(g.informative for g in groups)  # J's two informative first, then two informative extras
    assert (4 - len(own.drop)) + len(groups) == 4 + 2  # I + J, not more
    assert own.metrics(groups) == {"own_uninformative": 2, "own_replaced": 2, "informative_taken": 4}
    # Three informative senders only: J takes two, one extra is left to replace one own group.
    groups, own = take_replacing(FakeSwarm([peer(s, s.lower(), s in "ABC") for s in "ABCDE"]), OWN, 2, 10, True)
    assert len(groups) == 3 and own.replaced == 1 and len(own.drop) == 2  # the other is dropped unreplaced


def test_what_the_pool_cannot_replace_is_dropped_all_the_same():
    pool = [peer("A", "a", True), peer("B", "b", False), peer("C", "c", False)]
    groups, own = take_replacing(FakeSwarm(pool), OWN, 2, 10, True)
    # J = 2: A's informative group, then one other; one informative extra is wanted, none is left.
    assert len(groups) == 2 and own.replaced == 0 and len(own.drop) == 2
    assert (4 - len(own.drop)) + len(groups) < 4 + 2


def test_family_correctness_is_a_running_mean_per_family():
    fc = FamilyCorrectness(decay=0.5)
    # rollouts(...) are arithmetic groups: step 1 mean correctness 4/8 = 0.5, step 2 1.0
    assert fc.update(OWN) == {"arithmetic": 0.5}
    assert fc.update(rollouts((1, 1))) == {"arithmetic": 0.75}  # 0.5 x 0.5 + 0.5 x 1
    swarm = FakeSwarm([peer("A", "a", True)])
    take_replacing(swarm, OWN, 1, 10, False, fc)
    assert swarm.weakness == {"arithmetic": 0.625}  # this step's rollouts folded in before the take


def test_off_or_j_zero_asks_for_no_extra():
    pool = [peer(s, s, True) for s in "ABCDE"]
    groups, own = take_replacing(FakeSwarm(pool), OWN, 2, 10, False)
    assert len(groups) == 2 and own.replaced == 0 and own.drop == frozenset()
    groups, own = take_replacing(FakeSwarm(pool), OWN, 0, 10, True)  # J = 0: the solo filter
    assert groups == [] and own.replaced == 0 and len(own.drop) == 2


def test_a_solo_run_leaves_its_uninformative_groups_out_of_the_learners_batch(warm_tiny_model_dir, tmp_path):
    import asyncio

    from swarm_node.node.observe.metrics import read_metrics
    from swarm_node.node.config.config import load_config
    from swarm_node.node.run.trainer import TrainingNode

    cfg = load_config(None, {"model.name": str(warm_tiny_model_dir), "run.dir": str(tmp_path / "run"),
                             "run.progress": "off", "generation.prompts_per_step": 4,
                             "generation.num_generations": 4, "generation.max_completion_length": 8,
                             "tasks.difficulties": [1], "train.steps": 3, "run.checkpoint_every": 0,
                             "run.plot": False, "swarm.replace_uninformative": True})
    rows: list[int] = []

    async def go():
        node = await TrainingNode.create(cfg)
        real = node.learner.step
        node.learner.step = lambda samples: (rows.append(len(samples)), real(samples))[1]
        try:
            await node.run()
        finally:
            await node.close()

    asyncio.run(go())
    recs = read_metrics(tmp_path / "run" / "metrics.jsonl")
    kept = [4 * (4 - r["own_uninformative"]) for r in recs]  # G = 4 rows per kept group
    assert rows == [k for k in kept if k > 0]  # no step at all when every group was uninformative
    assert all(r["own_replaced"] == 0 and "informative_taken" not in r for r in recs)
