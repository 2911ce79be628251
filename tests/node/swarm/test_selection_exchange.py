"""Selection through a real exchange on a MemoryHub: admission scores each kept completion with
this node's reward, and a flood of crafted half-right groups (the ``crafted_informative`` attack)
gets at most its senders' share of a step under ``swarm.select = informative`` as under ``fresh``."""

from __future__ import annotations

import collections
import time
from types import SimpleNamespace

from swarm_node.node.clock import RoundClock
from swarm_node.node.sim.adversary.attacks_admitted import crafted_informative_batch
from swarm_node.node.sim.adversary.forge import Forger
from swarm_node.node.swarm.exchange import SwarmExchange
from swarm_node.node.transport.base import Delivery
from swarm_node.node.transport.memory import MemoryHub, MemoryTransport
from swarm_node.protocol.codec import encode
from swarm_node.protocol.identity import Identity
from swarm_node.protocol.messages import RolloutBatch, RolloutRecord
from swarm_node.rewards.registry import make_task
from swarm_node.rewards.scoring import RewardConfig
from tests.helpers.exchange import clock_at, envelope

EOS = 0
FP = "char-tok"


class CharTokenizer:
    """One id per character (EOS = 0): enough for the forger and for admission's text check."""

    eos_token_id = EOS

    def __call__(self, text, add_special_tokens=False):
        return {"input_ids": [ord(c) for c in text]}

    def decode(self, ids, skip_special_tokens=True):
        return "".join(chr(i) for i in ids if i != EOS)


def exchange(hub: MemoryHub, me: Identity, clock: RoundClock, select: str, **kw) -> SwarmExchange:
    tok = CharTokenizer()
    t = MemoryTransport(swarm="s", publisher=me.peer_id, hub=hub)
    return SwarmExchange(t, me, clock, tokenizer_fingerprint=FP, model_fingerprint="m", vocab_size=256,
                         decode_text=tok.decode, special_ids=frozenset({EOS}), eos_id=EOS, poll_seconds=0.01,
                         external_groups=8, max_sender_share=0.5, select=select, **kw)


def text_record(task_id: str, text: str) -> RolloutRecord:
    ids = tuple(ord(c) for c in text) + (EOS,)
    return RolloutRecord(task_id, ids, text, tuple(-0.5 for _ in ids), False)


def honest_batch(ident: Identity, r: int, tag: int, informative: int = 2) -> RolloutBatch:
    """``informative`` groups with one right and one wrong answer, the rest of 4 all wrong."""
    recs = []
    for k in range(4):
        tid = f"arithmetic:{1000 * tag + k}:1"
        ans = make_task(tid).answer
        texts = [f"<answer>{ans}</answer>", "<answer>x</answer>"] if k < informative else ["<answer>x</answer>"] * 2
        recs += [text_record(tid, t) for t in texts]
    return RolloutBatch(sender=ident.peer_id, round=r, policy_version=1, model_fingerprint="m",
                        tokenizer_fingerprint=FP, created_at=time.time(), rollouts=tuple(recs))


def crafted_envelope(ident: Identity, r: int) -> bytes:
    adv = SimpleNamespace(cfg=SimpleNamespace(generation=SimpleNamespace(num_generations=4)),
                          forge=Forger(CharTokenizer(), ident, FP, "m"))
    return adv.forge.seal(encode(crafted_informative_batch(adv, r)))


def test_admission_scores_each_kept_completion_with_this_nodes_reward():
    hub, me, peer = MemoryHub(), Identity.generate(), Identity.generate()
    ex = exchange(hub, me, clock_at(10), "informative", reward_cfg=RewardConfig(format_weight=0.25))
    ex.admit(Delivery(10, peer.peer_id, envelope(peer, encode(honest_batch(peer, 10, 1)))))
    groups = sorted(ex.take(8, 10), key=lambda g: g.task_id)
    assert [g.rewards for g in groups] == [(1.25, 0.25), (1.25, 0.25), (0.25, 0.25), (0.25, 0.25)]
    assert [g.informative for g in groups] == [True, True, False, False]


def test_the_crafted_attack_is_admitted_and_informative():
    hub, me, adv = MemoryHub(), Identity.generate(), Identity.generate()
    ex = exchange(hub, me, clock_at(10), "informative")
    assert ex.admit(Delivery(10, adv.peer_id, crafted_envelope(adv, 10))) == 4 and ex.stats.rejected == {}
    assert all(g.informative and len(g.records) == 4 for g in ex.take(8, 10))


def taken_by(select: str, attackers: int, seed: int, informative: int = 2) -> tuple[collections.Counter, int]:
    """One step of J = 8 (share 0.5: cap 4) from a pool of ``attackers`` crafted senders (4 groups
    each) and 3 honest senders (``informative`` of their 4 groups informative): groups per sender
    (the honest ones together) and how many honest informative groups were taken."""
    hub, me = MemoryHub(), Identity.generate()
    ex = exchange(hub, me, clock_at(10), select, seed=seed)
    for k in range(attackers):
        a = Identity.generate()
        assert ex.admit(Delivery(10, a.peer_id, crafted_envelope(a, 10))) == 4
    honest = [Identity.generate() for _ in range(3)]
    for tag, h in enumerate(honest):
        assert ex.admit(Delivery(10, h.peer_id, envelope(h, encode(honest_batch(h, 10, tag + 1, informative))))) == 4
    picked = ex.take(8, 10)
    names = {h.peer_id for h in honest}
    by = collections.Counter("honest" if g.sender in names else g.sender for g in picked)
    per_sender = collections.Counter(g.sender for g in picked)
    assert len(picked) == 8 and max(per_sender.values()) <= 4, per_sender  # ceil(8 x 0.5)
    return by, sum(g.sender in names and g.informative for g in picked)


def test_one_crafted_sender_gets_its_cap_under_informative_and_never_more():
    for seed in range(5):
        fresh, fresh_inf = taken_by("fresh", 1, seed)
        inform, inform_inf = taken_by("informative", 1, seed)
        attacker_fresh = sum(n for s, n in fresh.items() if s != "honest")
        attacker_inform = sum(n for s, n in inform.items() if s != "honest")
        # round-robin over 4 senders: 2 a sender under fresh; informative first: the attacker's 4
        # informative groups and the honest senders' 6 compete, 2 passes of 4 senders = 8.
        assert attacker_fresh == 2 and attacker_inform == 2
        assert fresh["honest"] == 6 and inform["honest"] == 6
        assert inform_inf == 6 and fresh_inf <= 6  # the honest informative groups are what is taken
        # Honest senders with nothing informative: the crafted groups go first, up to the cap.
        fresh, _ = taken_by("fresh", 1, seed, informative=0)
        inform, _ = taken_by("informative", 1, seed, informative=0)
        assert 8 - fresh["honest"] == 2 and 8 - inform["honest"] == 4  # ceil(8 x 0.5): bought, bounded


def test_a_flood_of_crafted_identities_is_bounded_per_sender_and_honest_informative_groups_still_come():
    for seed in range(3):
        fresh, fresh_inf = taken_by("fresh", 6, seed)
        inform, inform_inf = taken_by("informative", 6, seed)
        # 9 senders, 8 slots, one group a sender a pass (which sender misses out is the turn
        # order's draw): each attacker 1 at most under either rule, so the 6 identities buy 5 or 6
        # of 8 slots with or without crafting "informative" groups (keys are free: the fetch
        # budget bounds what many of them bring into the pool).
        for by in (fresh, inform):
            attackers = [n for s, n in by.items() if s != "honest"]
            assert max(attackers) == 1 and sum(attackers) in (5, 6) and by["honest"] in (2, 3)
        assert inform_inf == inform["honest"]  # every honest slot goes to an informative group
        assert fresh_inf <= fresh["honest"]
