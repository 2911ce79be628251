"""What the attack suite runs and judges it by: each scenario's attacks and the counters they must
move, the bounds of the targets (memory, ρ), and the honest swarm every scenario runs."""

from __future__ import annotations

from dataclasses import dataclass, field

MIB = 1 << 20
POOL_BYTES_CAP = 256 * MIB  # node.swarm.exchange.MAX_POOL_BYTES: what a node may pool from peers, in all
DECODE_SLACK = 128 * MIB  # envelopes being decoded (a 4 MiB one is ~50 MB of Python objects for a moment)
MAX_GROWTH = 64 * MIB  # growth over the run (last third vs middle third) beyond the clean runs' own
RHO_TOLERANCE = 0.02

# scenario -> (attacks the adversary cycles through, what the honest nodes must show for it)
SCENARIOS: dict[str, tuple[tuple[str, ...], str]] = {
    "displace": (("displace",), "a raw hivemind client writes under honest peers' subkeys with a later "
                                "expiration: every replica refuses (read back: 0 kept)"),
    "far_expiry": (("far_expiry",), "plain values and entries planted hours ahead under round and heartbeat "
                                    "keys (raw client), and signed entries 50 min / 3 h ahead"),
    "flood": (("flood",), "200 fresh keys a round, each a signed index entry whose body does not exist "
                          "or fails its sha256"),
    "honest_address": (("honest_address",), "20 fresh keys a round whose signed entries point at honest "
                                            "nodes' addresses: served nothing (refused_requests); the host says whom it "
                                            "serves, and the other keys' entries are skipped (misdirected)"),
    "logprob_1e300": (("logprob_1e300",), "per-token log-prob -1e300 (-inf in float32): implausible_logprob"),
    "logprob_1e4": (("logprob_1e4",), "per-token log-prob -1e4: implausible_logprob"),
    "foreign_logprob_gap": (("foreign_logprob_gap",), "another tokenizer's fingerprint, Σ log μ claimed "
                                                      "far below Σ log π: admitted, weight capped at 1 + ε_high"),
    "zero_advantage": (("zero_advantage",), "groups of identical completions claimed certain: admitted, "
                                            "no gradient, must not lower ρ"),
    "special_tokens": (("special_tokens",), "a <pad> mid-completion: special_tokens"),
    "oversized": (("oversized",), "4 keys, each a valid batch just under 4 MiB every round (64 x 8 "
                                  "completions of ~600 tokens): larger than all a node could use, "
                                  "not fetched (oversized)"),
    "unknown_family": (("unknown_family",), "a valid batch a round of task families nobody has, under the "
                                            "adversary's own key: never pooled, no rejection (unusable_batches), "
                                            "the key backed off after 3 rounds"),
    "unknown_family_flood": (("unknown_family_flood",), "16 fresh keys a round, each a valid batch of task "
                                                        "families nobody has, served by the Sybil: fetched only "
                                                        "within the budget left by known peers, never pooled"),
    "shard_flood": (("shard_flood",), "64 keys ground into one honest peer's index shard, an entry each a "
                                      "round at levels 0-2 pointing at junk (hash_mismatch)"),
    "future_created_at": (("future_created_at",), "created_at an hour ahead (batches and heartbeats): "
                                                  "created_at_mismatch"),
    "crafted_informative": (("crafted_informative",), "4 groups a round, each alternating the right answer and a "
                                                      "wrong one (half right: \"informative\" under this node's own "
                                                      "scoring), every token claimed at log-prob -1: admitted, at "
                                                      "most the sender's share of a step (run it with "
                                                      "--flags swarm.select=informative)"),
}

# What each attack must leave in the honest nodes' counters (summed over the honest nodes).
EXPECTED_REJECTIONS = {
    "flood": ("hash_mismatch",), "shard_flood": ("hash_mismatch",), "logprob_1e300": ("implausible_logprob",),
    "logprob_1e4": ("implausible_logprob",), "special_tokens": ("special_tokens",),
    "future_created_at": ("created_at_mismatch",), "oversized": ("oversized",),
}
# Counters other than rejections that each attack must move (summed over the honest nodes).
EXPECTED_COUNTERS = {"honest_address": ("refused_requests",),
                     # backed_off: the transport's own count, so a back-off that did nothing fails
                     "unknown_family": ("unusable_batches", "unusable_backed_off", "backed_off"),
                     "unknown_family_flood": ("unusable_batches",)}
RHO_ATTACKS = ("foreign_logprob_gap", "zero_advantage")  # rows that must not move ρ or the LR
# DHT writes the adversary must find no replica keeping (it reads every write back).
MUST_BE_REFUSED = {"displace": ("displace",),
                   "far_expiry": ("far_expiry:raw_plain", "far_expiry:raw_plain_heartbeat",
                                  "far_expiry:raw_unsigned_entry", "far_expiry:signed_3h")}


@dataclass
class Setup:
    """The honest swarm every scenario runs (and the clean baseline)."""

    nodes: int = 3
    steps: int = 25
    # 3 s: a clean step of three nodes on two cores takes 1.2-2.4 s, so 2 s rounds left no slack and
    # the pace measured the machine's last free cycles rather than what an attack costs.
    round_seconds: float = 3.0
    seed: int = 0
    model: str = "default"
    flags: dict[str, str] = field(default_factory=dict)  # more --section.key flags for every process

    def overrides(self) -> dict[str, str]:
        return {"model.name": self.model, "train.steps": str(self.steps),
                "swarm.round_seconds": str(self.round_seconds), "run.checkpoint_every": "0",
                "run.keep_checkpoints": "1", **self.flags}


def _setting(setup: Setup, key: str):
    """A config value in this setup: its flag if one is given, else the config's default."""
    from swarm_node.node.config.config import NodeConfig

    section, name = key.split(".")
    default = getattr(getattr(NodeConfig(), section), name)
    return type(default)(setup.flags[key]) if key in setup.flags else default


def sender_cap_of(setup: Setup) -> int:
    """The most groups one sender may give an honest node's step in this setup (node/swarm/selection.py)."""
    from swarm_node.node.swarm.selection import sender_cap

    return sender_cap(_setting(setup, "swarm.external_groups"), _setting(setup, "swarm.max_sender_share"))


def local_groups(setup: Setup) -> int:
    """I: the groups an honest node generates (and publishes) a step in this setup."""
    return _setting(setup, "generation.prompts_per_step") - _setting(setup, "swarm.external_groups")
