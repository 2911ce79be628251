"""Which pooled groups a step takes (node/swarm/selection.py): each rule on hand-built pools, the
per-sender cap under every rule, and what a flood of crafted "informative" groups can buy."""

from __future__ import annotations

import collections
import math
import random

import pytest

from swarm_node.node.swarm.pool import AdmittedGroup, PeerPool
from swarm_node.node.swarm.selection import select, sender_cap
from swarm_node.rewards.registry import make_task

TASK = make_task("arithmetic:1:1")


def grp(sender: str, rnd: int, name: str, informative: bool) -> AdmittedGroup:
    """A group of ``sender`` in round ``rnd``; informative: rewards 1.1 and 0.1, else 0.1 twice."""
    return AdmittedGroup(sender, rnd, 0, "m", "t", name, (), task=TASK, token_level=True,
                         rewards=(1.1, 0.1) if informative else (0.1, 0.1))


def names(groups) -> list[str]:
    return [g.task_id for g in groups]


def test_sender_cap_by_hand():
    # ceil(J x share), at least 1; 4 x 0.5 stays 2 and 3 x 0.5 rounds up to 2.
    assert [sender_cap(4, 0.5), sender_cap(3, 0.5), sender_cap(8, 0.5), sender_cap(4, 1.0),
            sender_cap(4, 0.01), sender_cap(10, 0.3)] == [2, 2, 4, 4, 1, 3]


def old_take(groups, n, share, rng):
    """PeerPool.take as it was before selection rules (the "fresh" rule must stay draw for draw)."""
    by_sender = collections.defaultdict(list)
    groups = list(groups)
    rng.shuffle(groups)
    for g in sorted(groups, key=lambda g: -g.round):
        by_sender[g.sender].append(g)
    cap = max(1, math.ceil(n * share - 1e-9))
    for s in by_sender:
        del by_sender[s][cap:]
    senders = list(by_sender)
    rng.shuffle(senders)
    senders.sort(key=lambda s: -by_sender[s][0].round)
    picked = []
    while len(picked) < n and any(by_sender.values()):
        for s in senders:
            if by_sender[s] and len(picked) < n:
                picked.append(by_sender[s].pop(0))
    return picked


# A (freshest group in round 6), B (round 5), C (round 3): each sender's turn comes in that order.
POOL = [grp("A", 6, "a6u", False), grp("A", 4, "a4i", True), grp("B", 5, "b5u", False),
        grp("B", 3, "b3i", True), grp("C", 3, "c3u", False)]


def test_informative_property():
    assert grp("A", 1, "x", True).informative and not grp("A", 1, "y", False).informative
    assert not AdmittedGroup("A", 1, 0, "m", "t", "z", (), task=TASK, token_level=True).informative  # unscored


@pytest.mark.parametrize("seed", range(40))
def test_fresh_is_the_old_rule_draw_for_draw(seed):
    gen = random.Random(seed)
    pool = [grp(f"s{gen.randrange(5)}", gen.randrange(3, 8), f"g{i}", gen.random() < 0.5) for i in range(gen.randrange(1, 20))]
    n, share = gen.randrange(1, 9), gen.choice([0.25, 0.5, 1.0])
    cap = max(1, math.ceil(n * share - 1e-9))
    assert names(select(pool, n, cap, "fresh", random.Random(seed))) == names(old_take(pool, n, share, random.Random(seed)))


def test_each_rule_on_a_hand_built_pool():
    rng = lambda: random.Random(0)  # noqa: E731 - no ties here: the rng decides nothing
    # fresh: each sender's freshest, senders in turn A, B, C.
    assert names(select(POOL, 3, 3, "fresh", rng())) == ["a6u", "b5u", "c3u"]
    # informative: first pass the informative ones (A's, then B's), then the freshest other, A's.
    assert names(select(POOL, 3, 3, "informative", rng())) == ["a4i", "b3i", "a6u"]
    # one a sender (cap 1): the same turn order, each sender's preferred group
    assert names(select(POOL, 2, 1, "fresh", rng())) == ["a6u", "b5u"]
    assert names(select(POOL, 2, 1, "informative", rng())) == ["a4i", "b3i"]
    # more than the pool holds: everything, informative first
    assert names(select(POOL, 9, 9, "informative", rng())) == ["a4i", "b3i", "a6u", "b5u", "c3u"]
    with pytest.raises(ValueError):
        select(POOL, 1, 1, "bogus", rng())


def fam(sender: str, rnd: int, task: str, informative: bool) -> AdmittedGroup:
    return AdmittedGroup(sender, rnd, 0, "m", "t", task, (), task=make_task(task), token_level=True,
                         rewards=(1.1, 0.1) if informative else (0.1, 0.1))


def test_weakest_takes_each_senders_groups_of_the_weakest_family_first():
    # This node: lists 0.1, arithmetic 0.6, counting unknown (0). A and B each hold three groups.
    pool = [fam("A", 9, "arithmetic:1:1", True), fam("A", 8, "lists:2:1", True), fam("A", 9, "counting:3:1", False),
            fam("B", 8, "arithmetic:4:1", True), fam("B", 7, "counting:5:1", True), fam("B", 8, "lists:6:1", False)]
    w = {"lists": 0.1, "arithmetic": 0.6}
    got = names(select(pool, 4, 2, "weakest", random.Random(0), weakness=w))
    # informative first, weakest family first within a sender, senders in turn A (round 9), B:
    # A's lists, B's counting (unknown: 0), A's arithmetic, B's arithmetic.
    assert got == ["lists:2:1", "counting:5:1", "arithmetic:1:1", "arithmetic:4:1"]
    assert names(select(pool, 4, 2, "informative", random.Random(0))) == [
        "arithmetic:1:1", "arithmetic:4:1", "lists:2:1", "counting:5:1"]  # freshest first
    for seed in range(10):  # the cap holds: 2 a sender whatever the weakness
        picked = select(pool, 4, 1, "weakest", random.Random(seed), extra=3, weakness=w)
        assert collections.Counter(g.sender for g in picked) == {"A": 1, "B": 1}


def test_extra_takes_only_informative_groups_within_the_same_cap():
    # n = 2, cap 2, up to 2 extra: fresh picks a6u, b5u; the extras are the informative a4i, b3i.
    assert names(select(POOL, 2, 2, "fresh", random.Random(0), extra=2)) == ["a6u", "b5u", "a4i", "b3i"]
    # cap 1: A and B have given their one; C has no informative group: no extra.
    assert names(select(POOL, 2, 1, "fresh", random.Random(0), extra=2)) == ["a6u", "b5u"]
    assert names(select(POOL, 2, 1, "informative", random.Random(0), extra=2)) == ["a4i", "b3i"]


def test_the_cap_holds_for_a_sender_holding_only_informative_groups():
    pool = ([grp("X", 10, f"x{i}", True) for i in range(6)] + [grp("H1", 10, f"h1{i}", False) for i in range(2)]
            + [grp("H2", 10, "h20", False)])
    for rule in ("fresh", "informative"):
        for seed in range(20):
            picked = select(pool, 4, 2, rule, random.Random(seed), extra=3)
            by = collections.Counter(g.sender for g in picked)
            assert by["X"] <= 2, (rule, by)  # ceil(4 x 0.5): preference cannot lift it, nor can extras
    # informative: X's crafted groups go first, but only 2 of them; the others fill the step
    picked = select(pool, 4, 2, "informative", random.Random(0))
    assert collections.Counter(g.sender for g in picked) == {"X": 2, "H1": 1, "H2": 1}


def test_what_a_crafted_sender_buys_is_its_share_and_no_more():
    # The attacker's crafted groups are older than the honest ones: "fresh" serves it last,
    # "informative" first, but never past its cap of ceil(4 x 0.5) = 2.
    pool = [grp("adv", 7, f"adv{i}", True) for i in range(5)]
    pool += [grp(f"H{k}", 10, f"h{k}{i}", False) for k in range(3) for i in range(2)]
    fresh = collections.Counter(g.sender for g in select(pool, 4, 2, "fresh", random.Random(1)))
    inform = collections.Counter(g.sender for g in select(pool, 4, 2, "informative", random.Random(1)))
    assert fresh["adv"] == 1 and inform["adv"] == 2


@pytest.mark.parametrize("seed", range(10))
def test_a_flood_of_crafted_identities_gets_at_most_its_share_and_honest_informative_groups_are_taken(seed):
    """K = 5 fresh identities, 4 crafted half-right groups each, in the newest round; 3 honest
    senders with 2 informative and 2 uninformative groups each. J = 8, share 0.5: cap 4."""
    gen = random.Random(seed)
    pool = [grp(f"sybil{k}", 10, f"s{k}.{i}", True) for k in range(5) for i in range(4)]
    pool += [grp(f"honest{k}", gen.choice([9, 10]), f"h{k}.{i}", i < 2) for k in range(3) for i in range(4)]
    gen.shuffle(pool)
    taken = {}
    for rule in ("fresh", "informative"):
        p = PeerPool(random.Random(seed))
        for g in pool:
            p.add(g)
        taken[rule] = p.take(8, 0.5, rule)
        by = collections.Counter(g.sender for g in taken[rule])
        assert len(taken[rule]) == 8 and max(by.values()) <= 4, (rule, by)
    sybil = {r: sum(g.sender.startswith("sybil") for g in t) for r, t in taken.items()}
    honest_inf = {r: sum(g.sender.startswith("honest") and g.informative for g in t) for r, t in taken.items()}
    # One group a sender a pass: 5 sybils and 3 honest senders each give one, under either rule.
    assert sybil == {"fresh": 5, "informative": 5}
    # Informative first: every honest sender's first group is an informative one.
    assert honest_inf["informative"] == 3 and honest_inf["fresh"] <= 3
