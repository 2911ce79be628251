"""The index's shard ladder and fetch budget (node/transport/hivemind/index.py), by hand."""

from __future__ import annotations

import random

import pytest

from swarm_node.node.swarm.limits import envelopes_wanted
from swarm_node.node.transport.hivemind.index import (MAX_SHARD_COUNT, SHARD_FANOUT, ReadPlan, choose_fetches,
                                           estimate_size, explore_allowance, level_for,
                                           parse_key, peer_hash, read_plan, round_key, search_levels,
                                           shard_prefix, write_levels)


@pytest.mark.parametrize("n, level", [(1, 0), (32, 0), (33, 1), (512, 1), (513, 2), (8192, 2), (8193, 3),
                                      (10**7, 3)])
def test_the_level_keeps_a_shard_near_32_entries(n, level):
    # level l has 16**l shards: 32 peers fit one shard, 512 fit 16 shards of 32, 8192 fit 256.
    assert level_for(n) == level


def test_writers_cover_every_reader_within_a_factor_of_two():
    assert write_levels(4) == [0]
    assert write_levels(40) == [0, 1]  # 20 -> level 0, 40 and 80 -> level 1
    assert write_levels(10_000) == [2, 3]  # 5000 -> 2, 10000 and 20000 -> 3
    for writer in (3, 30, 300, 3000, 30000):
        for reader in (writer / 2, writer, writer * 2):
            assert level_for(reader) in write_levels(writer)


def test_a_peer_has_one_shard_per_level_and_shards_nest():
    pid = "sn1" + "a" * 32
    h = peer_hash(pid)
    assert [shard_prefix(pid, level) for level in range(4)] == ["", h[:1], h[:2], h[:3]]
    assert parse_key(round_key("s", 12, h[:2])).prefix == h[:2]
    assert parse_key(round_key("s", 12, "")).round == 12
    for bad in ["swarm-node/s/rollouts/12/zz", "swarm-node/s/rollouts/x/", "swarm-node/s/rollouts/1/abcd",
                "swarm-node//peers/", "other/s/peers/", "swarm-node/s/peers/a/b"]:
        assert parse_key(bad) is None


def test_a_reader_reads_enough_shards_of_its_level_and_probes_one_up():
    rng = random.Random(0)
    assert read_plan(4, wanted=2, rng=rng).prefixes == [""]  # small swarm: the one shard holds everyone
    # 10,000 peers: level 3 (4096 shards, ~2.4 entries each); 2 x 2 wanted -> ceil(4 / 2.44) = 2 shards.
    plan = read_plan(10_000, wanted=2, rng=rng).prefixes
    assert len(plan) == 2 and all(len(p) == 3 for p in plan) and len(set(plan)) == 2
    # 1,000 peers: level 2 (~3.9 a shard) -> ceil(4 / 3.9) = 2 shards
    assert [len(p) for p in read_plan(1000, wanted=2, rng=rng).prefixes] == [2, 2]
    probe = read_plan(4, wanted=2, rng=rng, probe_up=True).prefixes
    assert probe[0] == "" and [len(p) for p in probe[1:]] == [1, 2, 3]  # one shard of each level above


def test_the_size_estimate_takes_the_largest_level_that_found_enough():
    # Level 1: 29 a shard (x 16 = 464: only the writers whose estimate put them there); level 2:
    # 4 and 5 (x 256 = 1152). A partly written level can only under-count: the larger wins.
    assert estimate_size([(1, 29), (2, 4), (2, 5)]) == pytest.approx(4.5 * 256)
    # Level 3 found 2 in all: noise, not trusted over level 2's 78.
    assert estimate_size([(2, 40), (2, 38), (3, 2)]) == pytest.approx(39 * 256)
    assert estimate_size([(0, 4), (1, 0)]) == 4
    assert estimate_size([(2, 1), (3, 2)]) == 2 * 4096  # nothing solid (3): the level that found most
    assert estimate_size([(1, 0)]) is None


def test_j_groups_worth_of_envelopes():
    assert envelopes_wanted(0, 4.0) == 0  # J = 0: nothing to fetch
    assert envelopes_wanted(4, 1.0) == 8  # nothing learnt yet: each envelope may hold one group
    assert envelopes_wanted(4, 4.0) == 2  # 2 x 4 groups / 4 a envelope
    assert envelopes_wanted(1, 8.0) == 2  # never fewer than two (one peer may be slow)


def test_known_publishers_are_fetched_first_and_unknown_ones_are_capped():
    known = {"k1", "k2", "k3"}
    flood = [f"sybil{i}" for i in range(200)]
    rng = random.Random(1)
    # Two slots for known publishers, one unknown key on top: 200 junk keys cannot take a known slot.
    picks = choose_fetches(flood + ["k1", "k2", "k3"], known, slots=2, explore=1, rng=rng)
    assert len(picks) == 3 and set(picks[:2]) <= known and picks[2] not in known
    assert choose_fetches(flood, known, slots=2, explore=0, rng=rng) == []  # junk alone: nothing spent
    # Every known publisher gets its turn over rounds (random among them).
    turns = {p for _ in range(50) for p in choose_fetches(["k1", "k2", "k3"], known, 1, 0, rng)}
    assert turns == known
    assert SHARD_FANOUT == 16


def test_bulky_known_publishers_come_after_the_others():
    from swarm_node.node.transport.hivemind.index import bulky_threshold

    assert bulky_threshold([20_000] * 3) == float("inf")  # no history yet
    assert bulky_threshold([20_000, 21_000, 22_000, 4_000_000]) == 4 * 22_000  # 4 x the median
    known = {"honest1", "honest2", "big1", "big2", "big3", "big4"}
    rng = random.Random(3)
    for _ in range(20):  # four keys with valid 4 MiB batches never take the two slots
        picks = choose_fetches(sorted(known), known, slots=2, explore=0, rng=rng,
                               bulky={"big1", "big2", "big3", "big4"})
        assert set(picks) == {"honest1", "honest2"}
    assert len(choose_fetches(["big1"], known, 2, 0, rng, bulky={"big1"})) == 1  # alone, still fetched


def test_unknown_keys_get_half_a_fetch_a_round_once_a_node_knows_enough():
    assert explore_allowance(10, known=0, want=2) == 2  # a newcomer: unknown is all there is
    assert explore_allowance(10, known=1, want=2) == 2
    assert [explore_allowance(r, known=5, want=2) for r in (10, 11, 12, 13)] == [1, 0, 1, 0]
    assert explore_allowance(10, known=0, want=0) == 0  # J = 0: nothing fetched at all


def test_a_reader_in_a_big_swarm_reads_the_shards_of_the_peers_it_knows():
    rng = random.Random(2)
    known = [f"sn1known{i}" for i in range(3)]
    plan = read_plan(10_000, wanted=2, rng=rng, favour=known).prefixes
    # Level 3: the first two known peers' shards, then one random shard (newcomers are still found).
    assert plan[:2] == [shard_prefix(known[0], 3), shard_prefix(known[1], 3)]
    assert len(plan) == 3 and len(plan[2]) == 3


def test_a_newcomer_explores_one_key_per_host_reachable_hosts_first():
    from swarm_node.node.transport.hivemind.index import explore_order

    rng = random.Random(0)
    # 100 fresh keys point at hosts that do not exist, 100 at the adversary's one host; two honest
    # peers, each on its own host.
    hosts = {f"ghost{i}": f"nowhere{i}" for i in range(100)} | {f"junk{i}": "adv" for i in range(100)}
    hosts |= {"honest1": "h1", "honest2": "h2"}
    reachable = {"h1", "h2", "adv"}
    for _ in range(20):
        order = explore_order(list(hosts), hosts, reachable, rng)
        assert sorted(order) == sorted(hosts)  # every candidate, once
        # One key per reachable host first (two picks find an honest peer, three find both),
        # then the hosts that do not exist; the adversary's other 99 keys only after all of them.
        assert {hosts[p] for p in order[:3]} == {"h1", "h2", "adv"}
        assert all(hosts[p].startswith("nowhere") for p in order[3:103])
        assert all(hosts[p] == "adv" for p in order[103:])
    # A uniform pick of 2 among the 202 keys would find an honest peer 2% of the time; here:
    firsts = [explore_order(list(hosts), hosts, reachable, rng)[:2] for _ in range(300)]
    found = sum(any(p.startswith("honest") for p in f) for f in firsts) / len(firsts)
    assert found == 1.0  # of 3 reachable hosts, 2 picks always include an honest one
    picks = choose_fetches(list(hosts), set(), 0, 2, rng, hosts=hosts, reachable=reachable)
    assert len({hosts[p] for p in picks}) == 2 and all(hosts[p] in reachable for p in picks)


def test_the_size_estimate_samples_only_shards_chosen_at_random():
    # 1,000 peers: level 2. The shard of the known peer the reader follows is favoured (read to find
    # that peer), never among the sampled ones the estimate counts: a Sybil that grinds keys into
    # its victim's shard fills exactly the shard every reader that follows the victim reads.
    victim = "sn1victim"
    for seed in range(20):
        plan = read_plan(1000, wanted=2, rng=random.Random(seed), favour=[victim], probe_up=True)
        assert plan.favoured == [shard_prefix(victim, 2)]
        assert shard_prefix(victim, 2) not in plan.sampled
        assert [len(p) for p in plan.sampled] == [2, 3]  # one random level-2 shard, one probe of level 3
        assert plan.prefixes == plan.favoured + plan.sampled
    # Level 1 (16 shards): the random ones are drawn from the 15 others (33 peers, 2.06 a shard:
    # 2 x 16 wanted -> ceil(32 / 2.06) = 16 shards, the favoured one and the 15 others).
    plans = [read_plan(33, wanted=16, rng=random.Random(s), favour=[victim]) for s in range(20)]
    assert all(shard_prefix(victim, 1) not in p.sampled and len(p.sampled) == 15 for p in plans)
    # 100 peers, 6.25 a level-1 shard: 2 x 8 wanted -> ceil(16 / 6.25) = 3 shards, minus the favoured 1
    assert len(read_plan(100, wanted=8, rng=random.Random(0), favour=[]).sampled) == 3
    assert len(read_plan(100, wanted=8, rng=random.Random(0), favour=["sn1a"]).sampled) == 2
    # Level 0: the one shard is both (and the transport counts it: it is the whole index).
    assert read_plan(4, wanted=2, rng=random.Random(0), favour=[victim]) == ReadPlan([""], [""])


def test_one_shard_counts_for_at_most_a_full_honest_shard():
    assert MAX_SHARD_COUNT == 64  # 2 x SHARD_TARGET: writers leave a level whose shards hold more
    # 160 ground keys and the victim in one level-1 shard: 64 x 16 = 1024, not 161 x 16 = 2576.
    assert estimate_size([(1, 161)]) == 1024
    # With two ordinary shards read beside it, it moves the mean by 64 / 3: (64 + 0 + 2) / 3 x 16 = 352.
    assert estimate_size([(1, 161), (1, 0), (1, 2)]) == pytest.approx(352)
    assert estimate_size([(0, 163)]) == 64  # the level-0 shard of a small swarm under the same flood
    assert estimate_size([(2, 40), (2, 38)]) == pytest.approx(39 * 256)  # honest counts are untouched


def test_a_known_peer_missing_from_its_shard_is_looked_for_lower_first():
    assert search_levels(2) == [1, 0, 3]  # below, nearest first, then above
    assert search_levels(3) == [2, 1, 0]
    assert search_levels(0) == [1, 2, 3]
    # A reader at level 3 (10,000 peers) reads a known peer's shards at the levels it is told to.
    plan = read_plan(10_000, wanted=2, rng=random.Random(0), favour=["sn1v", "sn1w"],
                     elsewhere={"sn1v": search_levels(3)})
    assert plan.favoured == [shard_prefix("sn1v", lv) for lv in (2, 1, 0)] + [shard_prefix("sn1w", 3)]
    # Only own-level favoured shards count toward the expected entries: 2 - 1 = 1 random level-3 shard.
    assert [len(p) for p in plan.sampled] == [3]


def test_a_promising_newcomer_is_explored_before_a_flood_of_fresh_keys():
    """Standing takes admissions in 3 rounds: the unknown publisher admitted before (promising) is
    explored first, whatever the number of fresh keys drawn beside it."""
    rng = random.Random(0)
    flood = [f"x{i}" for i in range(200)]
    hosts = {p: p for p in flood} | {"honest": "h"}
    for _ in range(20):
        picks = choose_fetches(flood + ["honest"], set(), slots=2, explore=1, rng=rng, hosts=hosts,
                               promising={"honest"})
        assert picks == ["honest"]
    # Without its earlier admission it is one draw among 201.
    assert sum(choose_fetches(flood + ["honest"], set(), 2, 1, rng, hosts=hosts) == ["honest"] for _ in range(50)) < 10


def test_a_read_favours_the_searched_then_known_then_promising_publishers():
    from swarm_node.node.transport.hivemind.index import favoured

    rng = random.Random(0)
    assert favoured(["s"], {"k1", "k2"}, {"p1"}, 4, rng)[:1] == ["s"]
    got = favoured(["s"], {"k1", "k2"}, {"p1", "p2"}, 4, rng)
    assert got[0] == "s" and set(got[1:3]) == {"k1", "k2"} and got[3] in {"p1", "p2"} and len(got) == 4
    assert len(favoured([], {f"k{i}" for i in range(10)}, {"p1"}, 4, rng)) == 4  # known fill it: no promising
    assert set(favoured([], set(), {"p1", "p2"}, 4, rng)) == {"p1", "p2"}  # a newcomer: its promising peers
    assert favoured(["k1"], {"k1"}, set(), 4, rng) == ["k1"]  # searched and known: once
