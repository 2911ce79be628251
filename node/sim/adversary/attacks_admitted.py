"""The attacks admitted by design (``ADMITTED_BY_DESIGN``): batches a peer may send honestly,
built to drag the learner's importance weights or to game group selection; what they must not do
is move ρ or the LR, or take more than the sender's share of a step.
"""

from __future__ import annotations

import hashlib
from typing import TYPE_CHECKING

from swarm_node.node.sim.adversary.forge import task_ids
from swarm_node.protocol.codec import encode
from swarm_node.protocol.messages import RolloutBatch, RolloutRecord
from swarm_node.rewards.registry import make_task

if TYPE_CHECKING:
    from swarm_node.node.sim.adversary.peer import Adversary

GROUPS = 4  # groups (tasks) in each batch


def foreign_gap_batch(adv: Adversary, r: int) -> RolloutBatch:
    """Right and wrong answers (advantages ≠ 0) under another tokenizer's fingerprint; every
    token claimed at log-prob -100 (the admission bound), so the claimed Σ log μ is far
    below what the receiver's policy gives the re-tokenized text: w = π/μ would be e^hundreds."""
    g = adv.cfg.generation.num_generations
    records = []
    for tid in task_ids(r, GROUPS):
        ans = make_task(tid).answer
        for k in range(g):
            text = f"<answer>{ans if k % 2 == 0 else ans + '1'}</answer>"
            records.append(RolloutRecord(tid, adv.forge.ids(text), text,
                                         tuple(-100.0 for _ in adv.forge.ids(text)), False))
    return adv.forge.batch_of(r, records, fingerprint="foreign-" + hashlib.sha256(b"other").hexdigest()[:48])


def zero_advantage_batch(adv: Adversary, r: int) -> RolloutBatch:
    """G identical completions per task (one reward, advantage 0), every token claimed
    certain (log μ = 0): w = π(y) ≪ 1, which would drag ρ if these rows counted."""
    g = adv.cfg.generation.num_generations
    records = []
    for tid in task_ids(r, GROUPS):
        rec = adv.forge.record(tid, adv.forge.ids(f"<answer>{make_task(tid).answer}</answer>"), 0.0)
        records += [rec] * g
    return adv.forge.batch_of(r, records)


def crafted_informative_batch(adv: Adversary, r: int) -> RolloutBatch:
    """Half right by construction: each task's G completions alternate the right answer and a
    wrong one, so the receiver's own scoring finds the rewards vary ("informative",
    node/swarm/selection.py), with every token claimed at log-prob -1. What it can buy under
    ``swarm.select = informative``: a place ahead of honest uninformative groups, at most the
    sender's ⌈J × max_sender_share⌉ of a step; its rows' weight stays bounded by ρ and truncation."""
    g = adv.cfg.generation.num_generations
    records = []
    for tid in task_ids(r, GROUPS):
        ans = make_task(tid).answer
        right = adv.forge.record(tid, adv.forge.ids(f"<answer>{ans}</answer>"), -1.0)
        wrong = adv.forge.record(tid, adv.forge.ids(f"<answer>{ans}1</answer>"), -1.0)
        records += [right if k % 2 == 0 else wrong for k in range(g)]
    return adv.forge.batch_of(r, records)


async def crafted_informative(adv: Adversary, r: int) -> bool:
    data = adv.forge.seal(encode(crafted_informative_batch(adv, r)))
    adv.published_groups(r, GROUPS)
    return await adv.publish(r, data)


async def foreign_logprob_gap(adv: Adversary, r: int) -> bool:
    data = adv.forge.seal(encode(foreign_gap_batch(adv, r)))
    adv.published_groups(r, GROUPS)
    return await adv.publish(r, data)


async def zero_advantage(adv: Adversary, r: int) -> bool:
    data = adv.forge.seal(encode(zero_advantage_batch(adv, r)))
    adv.published_groups(r, GROUPS)
    return await adv.publish(r, data)
