"""The attack suite (scripts/bench_attacks.py, node/sim/adversary/).

Fast, in one process: each envelope attack, as the adversary builds it, admitted by a node's
exchange or refused under the reason the adversary's docstring table gives.

Slow (``slow``): three of the script's scenarios, short, against a real swarm (a bootstrap peer
and three honest nodes over hivemind on 127.0.0.1, plus an adversary process), run through the
script's own functions, with the targets it reports asserted:

- a flood of 200 fresh keys a round with signed junk index entries: honest peers' groups still
  arrive, the junk bodies are refused (``hash_mismatch``), nothing of it is trained on;
- lying log-probs, -1e300 and -1e4 per token in turn: refused as ``implausible_logprob``, no
  NaN step;
- batches of zero-advantage groups claimed certain (admitted by design): ρ and the LR factor
  are not lowered.

Every wait is on a condition (the nodes' status files, their processes exiting), never a bare
sleep; a run past its deadline is stopped and its targets then fail with the numbers.
"""

from __future__ import annotations

import asyncio
import json

import pytest


import bench_attacks  # noqa: E402
from swarm_node.node.sim.adversary import Adversary  # noqa: E402

SMALL = {"generation.prompts_per_step": "4", "generation.num_generations": "4",
         "generation.max_completion_length": "8", "swarm.external_groups": "2",
         "learner.learning_rate": "3e-3"}
SCENARIOS = {
    "flood": ("flood",),
    "lying_logprobs": ("logprob_1e300", "logprob_1e4"),
    "zero_advantage": ("zero_advantage",),
}


@pytest.fixture(scope="module")
def tiny_policy(tiny_model_dir):
    from swarm_node.policies.policy import Policy

    return Policy.load(str(tiny_model_dir))


def _adversary_and_exchange(policy, kind: str, tmp_path):
    """An adversary running ``kind`` and an honest exchange, over one memory hub, with the tiny
    model's tokenizer: what each in-process attack test sends and receives through."""
    from swarm_node.node.clock import RoundClock
    from swarm_node.node.config.config import load_config
    from swarm_node.node.swarm.exchange import SwarmExchange
    from swarm_node.node.transport.memory import MemoryHub, MemoryTransport
    from swarm_node.protocol.identity import Identity

    tok = policy.tokenizer
    cfg = load_config(None, {"run.dir": str(tmp_path), "swarm.transport": "memory", "swarm.round_seconds": 60.0})
    hub, bad, me = MemoryHub(), Identity.generate(), Identity.generate()
    adv = Adversary(cfg, bad, MemoryTransport(swarm=cfg.swarm.name, publisher=bad.peer_id, hub=hub), tok,
                    policy.tokenizer_fingerprint, policy.model_fingerprint, [kind], tmp_path)
    ex = SwarmExchange(MemoryTransport(swarm=cfg.swarm.name, publisher=me.peer_id, hub=hub), me,
                       RoundClock(cfg.swarm.round_seconds), tokenizer_fingerprint=policy.tokenizer_fingerprint,
                       model_fingerprint=policy.model_fingerprint, vocab_size=len(tok),
                       decode_text=lambda ids: tok.decode(list(ids), skip_special_tokens=True),
                       group_cap=cfg.generation.num_generations, special_ids=frozenset(tok.all_special_ids),
                       eos_id=tok.eos_token_id)
    return adv, ex


@pytest.mark.parametrize("kind, reason", [
    ("logprob_1e300", "implausible_logprob"), ("logprob_1e4", "implausible_logprob"),
    ("special_tokens", "special_tokens"), ("future_created_at", "created_at_mismatch"),
    ("foreign_logprob_gap", None), ("zero_advantage", None), ("crafted_informative", None),
])
def test_each_envelope_attack_is_refused_under_its_reason_or_admitted_by_design(kind, reason, tiny_policy, tmp_path):
    policy = tiny_policy
    adv, ex = _adversary_and_exchange(policy, kind, tmp_path)

    async def go():
        r = ex.clock.current()
        sent = [await adv.attack(kind, r) for _ in range(2)]  # future_created_at: a batch, then a heartbeat
        return sent, await ex.poll_once()

    sent, admitted = asyncio.run(go())
    assert all(sent)
    if reason is None:  # admitted by design: four groups of G completions
        assert admitted == 4 and not ex.stats.rejected
        groups = list(ex.pool.groups.values())
        if kind == "zero_advantage":  # one completion G times: one reward, advantage 0; claimed certain
            assert all(len(set(g.records)) == 1 and set(g.records[0].behaviour_logprobs) == {0.0} for g in groups)
        elif kind == "crafted_informative":  # this node's tokenizer; half right, so informative here
            assert {g.tokenizer_fingerprint for g in groups} == {policy.tokenizer_fingerprint}
            assert all(len(set(g.rewards)) == 2 for g in groups)
            assert {lp for g in groups for r in g.records for lp in r.behaviour_logprobs} == {-1.0}
        else:  # another tokenizer; right and wrong answers; every token claimed at the admission bound
            assert {g.tokenizer_fingerprint for g in groups} != {policy.tokenizer_fingerprint}
            assert all(len({r.completion_text for r in g.records}) == 2 for g in groups)
            assert {lp for g in groups for r in g.records for lp in r.behaviour_logprobs} == {-100.0}
    else:
        assert admitted == 0 and set(ex.stats.rejected) == {reason}, dict(ex.stats.rejected)
        assert ex.stats.rejected[reason] == (2 if kind == "future_created_at" else 1)


def test_unknown_family_batches_are_refused_without_a_rejection_and_a_run_of_them_backs_the_key_off(
        tiny_policy, tmp_path):
    """The adversary's ``unknown_family``: a valid batch a round of a family nobody loaded. The
    node refuses each (not pooled, not a rejection) and, at the third round, backs the key off."""
    from swarm_node.node.swarm.unusable import RUN_ROUNDS

    adv, ex = _adversary_and_exchange(tiny_policy, "unknown_family", tmp_path)
    bad = adv.identity
    distrusted = []
    ex.transport.distrust = lambda publisher, r: distrusted.append((publisher, r)) or True  # a carrier that backs off

    async def go():
        r = ex.clock.current()
        for k in range(RUN_ROUNDS):
            assert await adv.attack("unknown_family", r - RUN_ROUNDS + 1 + k)
        return await ex.poll_once()

    assert asyncio.run(go()) == 0 and len(ex.pool) == 0
    assert not ex.stats.rejected and ex.stats.unusable_batches == RUN_ROUNDS
    assert ex.stats.dropped_unknown_family == 4 * RUN_ROUNDS
    assert ex.stats.unusable_backed_off == 1 and [p for p, _ in distrusted] == [bad.peer_id]


@pytest.mark.slow
@pytest.mark.daemon
@pytest.mark.subprocess
@pytest.mark.timeout(1800)  # five swarm runs of ~1-2 min each, more on a loaded machine
def test_flood_lying_logprobs_and_zero_advantage_leave_the_honest_swarm_as_it_was(warm_tiny_model_dir, tmp_path):
    setup = bench_attacks.Setup(nodes=3, steps=14, round_seconds=1.5, model=str(warm_tiny_model_dir), flags=SMALL)

    async def go():
        # Two clean runs: their spread is the run-to-run noise ρ is judged against (the warm model's
        # groups carry gradient, so ρ is a real, noisy number; rounds are wall-clock).
        cleans = [await bench_attacks.run_scenario(f"clean-{k}", (), setup, tmp_path / f"clean-{k}", say=print)
                  for k in (1, 2)]
        attacked = {}
        for name, attacks in SCENARIOS.items():
            attacked[name] = await bench_attacks.run_scenario(name, attacks, setup, tmp_path / name, say=print)
        return cleans, attacked

    cleans, attacked = asyncio.run(go())
    base = bench_attacks.clean_baseline(cleans)
    assert base["honest_received_per_step"] > 0, cleans  # the honest nodes did share when left alone
    report = {}
    for name, res in attacked.items():
        v = res["verdict"] = bench_attacks.verdict(res, base, setup)
        report[name] = {"verdict": v, "honest": res["honest"], "adversary": res["adversary"]}
    text = json.dumps(report, indent=1, default=str)
    for name, res in attacked.items():
        v, h = res["verdict"], res["honest"]
        assert sum((res["adversary"]["sent"] or {}).values()) >= 3, (name, text)  # it did attack
        assert v["every_step"]["ok"] and v["no_nan"]["ok"] and v["memory_bounded"]["ok"], (name, text)
        assert v["honest_received_90pct"]["ok"] is not False, (name, text)
        if h["received_exact"]:
            assert v["honest_received_90pct"]["ok"], (name, text)
    flood, lying, zero = attacked["flood"], attacked["lying_logprobs"], attacked["zero_advantage"]
    assert flood["verdict"]["rejected:hash_mismatch"]["ok"], text
    assert flood["verdict"]["attacker_never_trained_on"]["ok"], text
    assert lying["verdict"]["rejected:implausible_logprob"]["ok"], text
    assert lying["verdict"]["attacker_never_trained_on"]["ok"], text
    assert lying["honest"]["nan_steps"] == 0, text
    # Admitted by design, trained on, and yet ρ and the LR stay where the clean runs had them: the
    # rows carry no gradient, so they are not in ρ. Within 0.05, not the bench's 0.02: ρ is a real
    # number here (the warm model's groups carry gradient), and on a loaded 2-core machine it moves
    # with timing, whatever the attack (one CI run: clean 0.918, flood 0.900, lying 0.942, zero
    # advantage 0.896; a run alone: clean 0.938, zero advantage 0.907). A lie that reached ρ would move it far more.
    assert zero["honest"]["attacker_used"] > 0, text
    rho = zero["verdict"]["rho_unmoved"]
    assert rho["rho"] >= rho["clean_rho"] - 0.05 and rho["lr_factor"] >= rho["clean_lr_factor"] - 0.05, text
    # ... and never more in one step than its sender's share (J = 2, share 0.5: 1).
    assert zero["verdict"]["within_share"] == {"ok": True, "most_in_a_step": 1, "cap": 1}, text


def test_the_sender_cap_the_suite_judges_by_follows_the_setup_flags():
    assert bench_attacks.sender_cap_of(bench_attacks.Setup()) == 2  # the defaults: J = 4, share 0.5
    assert bench_attacks.sender_cap_of(bench_attacks.Setup(flags=SMALL)) == 1
    wide = bench_attacks.Setup(flags={"swarm.external_groups": "6", "swarm.max_sender_share": "0.34"})
    assert bench_attacks.sender_cap_of(wide) == 3  # ceil(6 x 0.34) = ceil(2.04)
