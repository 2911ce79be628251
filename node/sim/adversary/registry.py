"""The attacks by name: what ``--attacks`` chooses from, and the function that runs each.

An attack is ``async fn(adversary, round) -> bool``: it sends one hostile message (or set of DHT
writes) for the round, or returns False when it has nothing to use yet.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Awaitable, Callable

from swarm_node.node.sim.adversary import (attacks_admitted, attacks_dht, attacks_envelope, attacks_records,
                                           attacks_sybil, attacks_unusable)

if TYPE_CHECKING:
    from swarm_node.node.sim.adversary.peer import Adversary

Attack = Callable[["Adversary", int], Awaitable[bool]]

# In the order ``all`` cycles through them.
ATTACK_FUNCTIONS: dict[str, Attack] = {
    "garbage": attacks_envelope.garbage,
    "bad_signature": attacks_envelope.bad_signature,
    "forged_reward": attacks_envelope.forged_reward,
    "forged_truth": attacks_envelope.forged_truth,
    "text_mismatch": attacks_envelope.text_mismatch,
    "impersonation": attacks_envelope.impersonation,
    "replay": attacks_envelope.replay,
    "logprob_1e300": attacks_records.logprob_1e300,
    "logprob_1e4": attacks_records.logprob_1e4,
    "special_tokens": attacks_records.special_tokens,
    "future_created_at": attacks_records.future_created_at,
    "foreign_logprob_gap": attacks_admitted.foreign_logprob_gap,
    "zero_advantage": attacks_admitted.zero_advantage,
    "crafted_informative": attacks_admitted.crafted_informative,
    "displace": attacks_dht.displace,
    "far_expiry": attacks_dht.far_expiry,
    "flood": attacks_sybil.flood,
    "honest_address": attacks_sybil.honest_address,
    "oversized": attacks_sybil.oversized,
    "unknown_family": attacks_unusable.unknown_family,
    "unknown_family_flood": attacks_unusable.unknown_family_flood,
    "shard_flood": attacks_unusable.shard_flood,
}
ATTACKS = tuple(ATTACK_FUNCTIONS)
DEFAULT_ATTACKS = ("garbage", "bad_signature", "forged_reward", "forged_truth", "text_mismatch",
                   "impersonation", "replay")  # the envelope attacks every honest node must refuse
RAW_ATTACKS = ("displace", "far_expiry")  # a raw hivemind client
SYBIL_ATTACKS = ("far_expiry", "flood", "honest_address", "oversized", "unknown_family_flood",
                 "shard_flood")  # many keys, one DHT node
ADMITTED_BY_DESIGN = ("foreign_logprob_gap", "zero_advantage", "crafted_informative")
