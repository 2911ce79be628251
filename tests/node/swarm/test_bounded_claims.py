"""Claims a peer makes that steer the learner are bounded (issue 9, item 3): per-token log-probs
at admission, special tokens, the weight of a foreign-tokenizer row, and rows that carry no
gradient moving ρ and the learning rate. Hand-computed numbers where maths is involved."""

from __future__ import annotations

import math

import pytest
import torch

from swarm_node.node.swarm.admission import allowed_specials
from swarm_node.node.transport.base import Delivery
from swarm_node.policies.loss import LossConfig, LossInputs, policy_loss, row_caps, sequence_weights
from swarm_node.policies.offpolicy import ess_fraction, token_log_ratios
from swarm_node.protocol.codec import encode
from swarm_node.protocol.identity import Identity
from swarm_node.protocol.messages import MIN_TOKEN_LOGPROB, RolloutRecord
from tests.helpers.exchange import batch, clock_at, decode_text, envelope, make_exchange
from swarm_node.node.transport.memory import MemoryHub

EOS, PAD = 1, 0


def _ex():
    hub, me, peer = MemoryHub(), Identity.generate(), Identity.generate()
    return make_exchange(hub, me, clock_at(10), special_ids=frozenset({PAD, EOS, 40}), eos_id=EOS), peer


def _rec(ids, lps=None):
    return RolloutRecord("arithmetic:1:1", tuple(ids), decode_text(ids),
                         tuple(lps if lps is not None else [-0.5] * len(ids)), False)


@pytest.mark.parametrize("lps, reason", [
    ((-1e300, -0.5), "implausible_logprob"),  # -inf in float32: NaN steps for everyone
    ((-1e4, -1e4), "implausible_logprob"),
    ((MIN_TOKEN_LOGPROB - 1e-3, -0.5), "implausible_logprob"),
    ((MIN_TOKEN_LOGPROB, -0.5), None),  # the bound itself is admitted
])
def test_token_logprobs_below_the_bound_are_refused_with_their_reason(lps, reason):
    ex, peer = _ex()
    n = ex.admit(Delivery(10, peer.peer_id, envelope(peer, encode(batch(peer, 10, [_rec((3, 4), lps)])))))
    assert ex.stats.rejected == ({reason: 1} if reason else {})
    assert n == (0 if reason else 1)


@pytest.mark.parametrize("ids, ok", [
    ((3, 4, EOS), True),       # a final EOS is how completions end
    ((3, 4), True),            # truncated: no EOS at all
    ((3, PAD, 4, EOS), False),  # <pad> in the middle: invisible to decode(skip_special_tokens)
    ((3, EOS, 4, EOS), False),  # an EOS before the end
    ((3, 4, 40), False),       # another special token at the end
])
def test_special_tokens_other_than_a_final_eos_are_refused(ids, ok):
    assert allowed_specials(ids, frozenset({PAD, EOS, 40}), EOS) is ok
    ex, peer = _ex()
    ex.admit(Delivery(10, peer.peer_id, envelope(peer, encode(batch(peer, 10, [_rec(ids)])))))
    assert ex.stats.rejected == ({} if ok else {"special_tokens": 1})


def test_a_node_does_not_publish_what_its_peers_would_refuse():
    from swarm_node.node.run.rollouts import Rollout, to_records
    from swarm_node.policies.policy import Completion
    from swarm_node.rewards.scoring import Reward
    from swarm_node.rewards.task import TaskId

    def rollout(ids):
        c = Completion((5,), tuple(ids), "x", tuple(-0.5 for _ in ids), False)
        return Rollout(TaskId.parse("arithmetic:1:1"), c, 0, Reward(0.0, 0.0))

    recs = to_records([rollout((3, 4, EOS)), rollout((3, PAD, EOS))], frozenset({PAD, EOS}), EOS)
    assert [r.completion_ids for r in recs] == [(3, 4, EOS)]


def test_a_peer_text_spelling_a_special_token_is_text(tiny_model_dir):
    from swarm_node.policies.policy import Policy

    p = Policy.load(str(tiny_model_dir))
    eos = p.tokenizer.eos_token
    ids = p.encode_completion(f"7{eos}<answer>7</answer>")
    assert ids.count(p.eos_token_id) == 1 and ids[-1] == p.eos_token_id  # only the EOS we append


# ---------------------------------------------------------------------------- the maths, by hand

def test_rho_ignores_rows_that_carry_no_gradient():
    # Two rows carry gradient (w = 1, 1); three zero-advantage rows have w = 0 (a peer that
    # claimed its tokens were certain). Over every row ESS = (1+1)^2 / (1+1) = 2, rho = 2/5 = 0.4;
    # over the rows that carry gradient rho = 1.0, and the sqrt LR factor stays 1.
    w = torch.tensor([1.0, 1.0, 0.0, 0.0, 0.0])
    carry = torch.tensor([True, True, False, False, False])
    assert ess_fraction(w) == pytest.approx(0.4)
    assert ess_fraction(w, carry) == pytest.approx(1.0)
    assert ess_fraction(w, torch.zeros(5, dtype=torch.bool)) == 1.0  # nothing to correct
    # Uneven weights among gradient rows still count: [4, 0] -> ESS 1, rho 0.5.
    assert ess_fraction(torch.tensor([4.0, 0.0, 9.0]), torch.tensor([True, True, False])) == pytest.approx(0.5)


def test_infinities_never_become_nan():
    # A row whose behaviour log-probs are -inf (what -1e300 becomes in float32), taken on the
    # sequence-level path: inf * 0 used to be NaN in the loss and every gradient.
    logp = torch.tensor([[-1.0, -2.0], [-0.5, -0.5]], requires_grad=True)
    beh = torch.tensor([[-float("inf"), -float("inf")], [-0.5, -0.5]])
    mask = torch.tensor([[1.0, 1.0], [1.0, 0.0]])
    assert torch.equal(token_log_ratios(logp, beh, torch.tensor([[0.0, 0.0], [1.0, 0.0]])),
                       torch.zeros(2, 2))  # masked: 0, not NaN
    cfg = LossConfig()
    seq = torch.tensor([True, False])
    w = sequence_weights(logp, mask, torch.tensor([-3.0, -0.5]), 8.0)
    out = policy_loss(LossInputs(logp=logp, behaviour_logp=beh, behaviour_seq_logp=torch.tensor([-3.0, -0.5]),
                                 mask=mask, advantages=torch.tensor([1.0, -1.0]),
                                 sample_mask=torch.tensor([True, True]), sequence_level=seq, seq_weights=w), cfg)
    out.loss.backward()
    assert math.isfinite(float(out.loss.detach())) and torch.isfinite(logp.grad).all()


def test_a_foreign_tokenizer_claim_buys_nothing_over_the_token_path():
    # Row 0: a peer with another tokenizer claims Σ log μ = -50 for a completion this policy
    # gives Σ log π = -3: w = e^47, truncated at c = 8 before; now at 1 + ε_high = 1.28, the most
    # a token-path row's ratio can count for with a positive advantage. Row 1: a local row with
    # sequence weights keeps c. In sequence mode every row keeps c.
    cfg = LossConfig(epsilon_high=0.28, weight_cap=8.0)
    foreign, local = torch.tensor([True, False]), torch.tensor([False, True])
    caps = row_caps(cfg, foreign, local)
    assert caps.tolist() == pytest.approx([1.28, 8.0])
    logp = torch.tensor([[-1.0, -2.0], [-20.0, -20.0]])
    mask = torch.ones(2, 2)
    w = sequence_weights(logp, mask, torch.tensor([-50.0, -50.0]), caps)
    assert w.tolist() == pytest.approx([1.28, 8.0])
    seq_mode = row_caps(LossConfig(importance_sampling_level="sequence"), foreign, local)
    assert seq_mode.tolist() == [8.0, 8.0]
    assert row_caps(LossConfig(epsilon=0.2, epsilon_high=None), foreign, local).tolist() == pytest.approx([1.2, 8.0])


def test_learner_rho_and_lr_are_unmoved_by_zero_advantage_rows(tiny_model_dir):
    # The learner end to end: a group with rewards [1, 0] sampled by this very policy (w = 1),
    # plus a peer's zero-advantage group of 3 whose claimed log μ = 0 per token makes w ≈ 0.
    # Old rule: rho ≈ 2/5 = 0.4 and the LR factor sqrt(0.4) = 0.63; now rho = 1 and factor 1.
    from swarm_node.policies.learner import Learner, TrainSample
    from swarm_node.policies.policy import Policy, TokenBatch

    policy = Policy.load(str(tiny_model_dir))
    prompt = policy.encode_prompts(["what is 2+2?"])[0]
    comps = [policy.encode_completion(t) for t in ("<answer>4</answer>", "<answer>5</answer>", "4", "5", "6")]
    batch = TokenBatch.build([prompt] * 5, comps, policy.tokenizer.pad_token_id)
    with torch.no_grad():
        lp = policy.completion_logprobs(batch)
    rows = [tuple(lp[i, :len(c)].tolist()) for i, c in enumerate(comps)]
    samples = [TrainSample("g", prompt, comps[i], rows[i], sum(rows[i]), r) for i, r in ((0, 1.0), (1, 0.0))]
    samples += [TrainSample("peer/1/g", prompt, comps[i], tuple(0.0 for _ in comps[i]), 0.0, 0.0, local=False)
                for i in (2, 3, 4)]
    m = Learner(policy, learning_rate=1e-3, lr_rule="sqrt").step(samples)
    assert m["grad_rows"] == 2 and m["rho"] == pytest.approx(1.0, abs=1e-4)
    assert m["lr_factor"] == pytest.approx(1.0, abs=1e-4) and m["zero_adv_frac"] == pytest.approx(0.6)
    assert m["behaviour_rho"] == pytest.approx(1.0, abs=1e-4)


# ------------------------------------------------------------------- memory per sender (item 4)

def test_a_created_at_that_disagrees_with_the_signed_time_is_refused():
    import time

    ex, peer = _ex()
    future = batch(peer, 10, [_rec((3, 4))], created_at=time.time() + 3600)  # "alive" for an hour
    ex.admit(Delivery(10, peer.peer_id, envelope(peer, encode(future))))
    assert ex.stats.rejected == {"created_at_mismatch": 1}


def test_heartbeats_are_bounded_whatever_the_number_of_fresh_identities(monkeypatch):
    import time

    import swarm_node.node.swarm.limits as swarm
    from swarm_node.protocol.messages import Announcement

    monkeypatch.setattr(swarm, "MAX_TRACKED_PEERS", 50)
    ex, _ = _ex()
    for _ in range(120):  # a Sybil flood of correctly signed heartbeats
        p = Identity.generate()
        hb = Announcement(sender=p.peer_id, round=10, policy_version=0, model_fingerprint="m",
                          tokenizer_fingerprint="tok-fp", created_at=time.time(), addrs=())
        assert ex.admit_announcement(Delivery(10, p.peer_id, envelope(p, encode(hb))))
    assert len(ex.peers) == 50


def test_a_sender_over_its_memory_share_loses_its_own_oldest_groups(monkeypatch):
    import swarm_node.node.swarm.pool as swarm

    ex, flooder = _ex()
    honest = Identity.generate()
    small = batch(honest, 9, [_rec((3, 4))])
    per_group = swarm.group_bytes(swarm.PeerGroup("x", 0, 0, "m", "t", "arithmetic:1:1", (_rec(tuple(range(2, 30))),)))
    monkeypatch.setattr(swarm, "MAX_SENDER_BYTES", 5 * per_group)  # room for 5 of the flooder's groups
    ex.admit(Delivery(9, honest.peer_id, envelope(honest, encode(small))))
    for r in (8, 9, 10):  # 4 groups a round, all within the window
        recs = [RolloutRecord(f"arithmetic:{r * 10 + k}:1", tuple(range(2, 30)), decode_text(range(2, 30)),
                              tuple(-0.5 for _ in range(28)), False) for k in range(4)]
        assert ex.admit(Delivery(r, flooder.peer_id, envelope(flooder, encode(batch(flooder, r, recs)), seq=r))) == 4
    mine = [g for g in ex.pool.groups.values() if g.sender == flooder.peer_id]
    assert len(mine) == 5 and {g.round for g in mine} == {9, 10}  # round 8 went first, then part of 9
    assert [g.sender for g in ex.pool.groups.values()].count(honest.peer_id) == 1  # the honest group stays
    assert ex.status()["pool_bytes"] == sum(swarm.group_bytes(g) for g in ex.pool.groups.values())
    assert ex.stats.dropped_full == 7


def test_learner_rho_still_falls_with_off_policy_gradient_rows(tiny_model_dir):
    # Rewards [1, 0]: both rows carry gradient. Row 0 was sampled by this policy (w = 1); row 1's
    # behaviour claims log μ one nat above log π (w = e^-1). By hand:
    # ρ = (1 + e^-1)^2 / (2 (1 + e^-2)) = 1.87109 / 2.27067 = 0.82403, LR factor sqrt(ρ) = 0.90776.
    from swarm_node.policies.learner import Learner, TrainSample
    from swarm_node.policies.policy import Policy, TokenBatch

    policy = Policy.load(str(tiny_model_dir))
    prompt = policy.encode_prompts(["what is 2+2?"])[0]
    comps = [policy.encode_completion(t) for t in ("<answer>4</answer>", "<answer>5</answer>")]
    with torch.no_grad():
        lp = policy.completion_logprobs(TokenBatch.build([prompt] * 2, comps, policy.tokenizer.pad_token_id))
    rows = [lp[i, :len(c)].tolist() for i, c in enumerate(comps)]
    rows[1][0] += 1.0  # log μ = log π + 1 on one token: Σ log π - Σ log μ = -1
    samples = [TrainSample("g", prompt, comps[i], tuple(rows[i]), sum(rows[i]), float(i == 0)) for i in (0, 1)]
    m = Learner(policy, learning_rate=1e-3, lr_rule="sqrt").step(samples)
    e = math.exp(-1)
    rho = (1 + e) ** 2 / (2 * (1 + e * e))
    assert m["grad_rows"] == 2 and m["rho"] == pytest.approx(rho, abs=1e-4) and rho == pytest.approx(0.82403, abs=1e-5)
    assert m["lr_factor"] == pytest.approx(math.sqrt(rho), abs=1e-4)


def test_a_flood_of_fresh_keys_does_not_push_honest_groups_out_of_the_pool(monkeypatch):
    import swarm_node.node.swarm.pool as swarm

    monkeypatch.setattr(swarm, "MAX_POOL_GROUPS", 20)
    ex, honest = _ex()
    ex.admit(Delivery(10, honest.peer_id, envelope(honest, encode(batch(honest, 10, [_rec((3, 4))])))))
    for _ in range(10):  # 10 fresh keys x 4 groups each: twice the pool
        k = Identity.generate()
        recs = [RolloutRecord(f"arithmetic:{n}:1", (3, 4), decode_text((3, 4)), (-0.5, -0.5), False) for n in range(4)]
        ex.admit(Delivery(10, k.peer_id, envelope(k, encode(batch(k, 10, recs)))))
    senders = [g.sender for g in ex.pool.groups.values()]
    assert len(senders) == 20 and honest.peer_id in senders  # the largest holders gave way, not the oldest


def test_with_delta_off_a_peers_row_keeps_the_default_ratio_clamp():
    # log π = -1, claimed log μ = -20: r = e^19. A negative advantage is not clipped by PPO from
    # above, so with δ off the loss (and gradient) of that token would scale with e^19 ≈ 1.8e8.
    # A peer's row keeps δ = 4: its per-token loss is -min(4·A, 1.28·A) = 4 for A = -1.
    logp = torch.tensor([[-1.0]], requires_grad=True)
    args = dict(logp=logp, behaviour_logp=torch.tensor([[-20.0]]), behaviour_seq_logp=torch.tensor([-20.0]),
                mask=torch.ones(1, 1), advantages=torch.tensor([-1.0]), sample_mask=torch.tensor([True]),
                sequence_level=torch.tensor([False]), seq_weights=torch.tensor([1.0]))
    cfg = LossConfig(delta=None)
    local = policy_loss(LossInputs(**args, external=torch.tensor([False])), cfg)
    peer = policy_loss(LossInputs(**args, external=torch.tensor([True])), cfg)
    assert float(local.loss.detach()) == pytest.approx(math.exp(19), rel=1e-4)  # the user's choice, locally
    assert float(peer.loss.detach()) == pytest.approx(4.0)


# ------------------------------------------------------ one sender's claims and ρ (per-source ESS)

def _honest_plus_hostile(policy, hostile_claims):
    """Two honest local groups of 2 sampled by this very policy (w̄ = 1), rewards [1, 0] each, and
    one hostile sender's group of 2, rewards [1, 0], whose per-token log μ claims are
    ``hostile_claims`` (one value per row, within the admission bound). Every row carries gradient.
    Also returns the hostile rows' Σ log π (under this policy)."""
    from swarm_node.policies.learner import TrainSample
    from swarm_node.policies.policy import TokenBatch

    prompt = policy.encode_prompts(["what is 2+2?"])[0]
    texts = ("<answer>4</answer>", "<answer>5</answer>", "4", "5", "<answer>6</answer>", "6")
    comps = [policy.encode_completion(t) for t in texts]
    with torch.no_grad():
        lp = policy.completion_logprobs(TokenBatch.build([prompt] * 6, comps, policy.tokenizer.pad_token_id))
    rows = [tuple(lp[i, :len(c)].tolist()) for i, c in enumerate(comps)]
    samples = [TrainSample(f"g{i // 2}", prompt, comps[i], rows[i], sum(rows[i]), float(i % 2 == 0))
               for i in range(4)]
    for i, claim in zip((4, 5), hostile_claims):
        lps = tuple(claim for _ in comps[i])
        # group = PeerGroup.key, "sender/round/task", as node/run/rollouts.py builds it; no source field
        samples.append(TrainSample("sn1hostile/7/arithmetic:1:1", prompt, comps[i], lps, sum(lps),
                                   float(i == 4), local=False))
    return samples, [sum(rows[i]) for i in (4, 5)]


@pytest.mark.parametrize("claims, rho_pooled, rho_hostile", [
    # Both rows claim -100/token: w̄ = [1, 1, 1, 1, 8, 8]. Pooled: Σw = 20, Σw² = 132 →
    # ρ = 400/132/6 = 0.50505, LR factor sqrt = 0.71067. Per source: ρ_hostile = 1 → ρ = 1.
    ((MIN_TOKEN_LOGPROB, MIN_TOKEN_LOGPROB), 400 / 132 / 6, 1.0),
    # -100 on one row, 0 on the other: w̄ = [1, 1, 1, 1, 8, ≈0]. Pooled: Σw = 12, Σw² = 68 →
    # ρ = 144/68/6 = 0.35294, factor 0.59409. Per source: ρ_hostile = 8²/(2·8²) = 0.5 →
    # ρ = (4·1 + 2·0.5)/6 = 0.83333, factor 0.91287.
    ((MIN_TOKEN_LOGPROB, 0.0), 144 / 68 / 6, 0.5),
    # Both claim 0: w̄_i = exp(Σ log π_i) ≈ 0 (a random model: ~1e-7 and less). Pooled: ρ ≈ 4/6
    # (ESS ≈ 4 over 6 rows); per source ρ_hostile from the two tiny weights, ≥ 1/2 → ρ ≥ 5/6.
    ((0.0, 0.0), None, None),
])
def test_one_senders_claims_lower_rho_and_lr_by_at_most_its_share(tiny_model_dir, claims, rho_pooled,
                                                                  rho_hostile):
    from swarm_node.policies.learner import Learner
    from swarm_node.policies.policy import Policy

    policy = Policy.load(str(tiny_model_dir))
    samples, seq_logpi = _honest_plus_hostile(policy, claims)
    if rho_hostile is None:  # w̄ = exp(Σ log π − 0), by the formula, from this policy's log π
        w = [math.exp(x) for x in seq_logpi]
        rho_hostile = sum(w) ** 2 / (2 * sum(x * x for x in w))
        rho_pooled = (4 + sum(w)) ** 2 / (6 * (4 + sum(x * x for x in w)))
    m = Learner(policy, learning_rate=1e-3, lr_rule="sqrt").step(samples)
    honest_share = 4 / 6
    rho = (4 * 1.0 + 2 * rho_hostile) / 6
    assert m["grad_rows"] == 6
    assert m["rho"] >= honest_share - 1e-6 and m["rho"] == pytest.approx(rho, abs=1e-4)
    assert m["lr_factor"] >= math.sqrt(honest_share) - 1e-6
    assert m["lr_factor"] == pytest.approx(math.sqrt(rho), abs=1e-4) and m["ess"] == pytest.approx(6 * rho, abs=1e-3)
    assert m["rho_pooled"] == pytest.approx(rho_pooled, abs=1e-4)  # the old rule, kept as a diagnostic
    assert m["grad_sources"] == 2
    assert math.isfinite(m["grad_norm"])


def test_peer_rows_take_their_source_from_the_sender():
    from swarm_node.policies.learner import LOCAL_SOURCE, TrainSample, sample_source

    base = dict(prompt_ids=(2,), completion_ids=(3,), behaviour_logprobs=(-1.0,), behaviour_seq_logprob=-1.0,
                reward=0.0)
    assert sample_source(TrainSample("arithmetic:1:1", **base)) == LOCAL_SOURCE  # this node's rows: one source
    assert sample_source(TrainSample("sn1abc/3/arithmetic:1:1", **base, local=False)) == "sn1abc"
    assert sample_source(TrainSample("sn1abc/3/arithmetic:1:1", **base, local=False, source="sn1xyz")) == "sn1xyz"
