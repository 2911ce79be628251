"""SwarmExchange admission and sampling, one rule at a time, over the in-memory transport."""

from __future__ import annotations

import asyncio
import time

import pytest

from swarm_node.node.swarm.admission import REJECT_REASONS
from swarm_node.node.transport.base import MAX_ENVELOPE_SIZE, Delivery
from swarm_node.node.transport.memory import MemoryHub, MemoryTransport
from swarm_node.protocol.codec import encode
from swarm_node.protocol.identity import Identity
from swarm_node.protocol.messages import Announcement, RolloutRecord
from swarm_node.protocol.signing import Envelope, canonical_bytes, envelope_to_bytes, sign
from tests.helpers.exchange import TOK_FP, VOCAB, batch, clock_at, envelope, make_exchange, record, tamper_body


@pytest.fixture
def setup():
    hub = MemoryHub()
    me, peer = Identity.generate(), Identity.generate()
    clock = clock_at(10)
    return hub, me, peer, clock, make_exchange(hub, me, clock)


def test_valid_batch_is_admitted_as_groups(setup):
    hub, me, peer, clock, ex = setup
    ex.admit(Delivery(10, peer.peer_id, envelope(peer, encode(batch(peer, 10)))))
    assert ex.stats.rejected == {}
    assert ex.available(10) == 2  # two tasks -> two groups
    groups = ex.take(5, 10)
    assert sorted(len(g.records) for g in groups) == [1, 2]
    assert all(g.sender == peer.peer_id and g.round == 10 and g.policy_version == 3 for g in groups)
    assert ex.available(10) == 0  # each group is used once
    assert ex.stats.groups_used[peer.peer_id] == 2


def _reject_cases(me, peer, other):
    good = encode(batch(peer, 10))
    env = sign(good, peer, 7)
    # Signed by `other`, claiming to be `peer`: the key does not hash to the peer id.
    forged_sender = Envelope(peer.peer_id, other.public_key_bytes, 8, b"\x01" * 16, time.time(), good,
                             other.sign(canonical_bytes(peer.peer_id, other.public_key_bytes, 8,
                                                        b"\x01" * 16, time.time(), good)))
    bad_sig = envelope_to_bytes(env)[:-1] + bytes([envelope_to_bytes(env)[-1] ^ 1])
    return {
        "malformed_envelope": (peer.peer_id, 10, b"\x93not an envelope"),
        "bad_signature": (peer.peer_id, 10, bad_sig),
        "sender_mismatch": (peer.peer_id, 10, envelope_to_bytes(forged_sender)),
        "stale_clock": (peer.peer_id, 10, envelope(peer, good, now=time.time() - 3600)),
        "malformed": (peer.peer_id, 10, envelope(peer, b"\xc1garbage")),
        "unknown_field": (peer.peer_id, 10, envelope(peer, tamper_body(
            good, lambda o: o["body"]["rollouts"][0].__setitem__("reward", 1.0)))),
        "unsupported_version": (peer.peer_id, 10, envelope(peer, tamper_body(good, lambda o: o.__setitem__("v", 99)))),
        "wrong_kind": (peer.peer_id, 10, envelope(peer, encode(Announcement(
            sender=peer.peer_id, round=10, policy_version=0, model_fingerprint="m",
            tokenizer_fingerprint=TOK_FP, created_at=time.time(), addrs=()))))
        ,
        "wrong_round": (peer.peer_id, 9, envelope(peer, good)),
        "bad_task": (peer.peer_id, 10, envelope(peer, encode(batch(peer, 10, [record("arithmetic:1:99")])))),
        "bad_tokens": (peer.peer_id, 10, envelope(peer, encode(batch(peer, 10, [record(ids=(1, VOCAB))])))),
        "text_mismatch": (peer.peer_id, 10, envelope(peer, encode(batch(peer, 10, [RolloutRecord(
            "arithmetic:1:1", (1, 2), "<answer>42</answer>", (-0.1, -0.1), False)])))),
    }


@pytest.mark.parametrize("reason", ["malformed_envelope", "bad_signature", "sender_mismatch",
                                    "stale_clock", "malformed", "unknown_field", "unsupported_version",
                                    "wrong_kind", "wrong_round", "bad_task", "bad_tokens", "text_mismatch"])
def test_each_rejection_is_counted_under_its_reason(setup, reason):
    hub, me, peer, clock, ex = setup
    publisher, r, data = _reject_cases(me, peer, Identity.generate())[reason]
    assert ex.admit(Delivery(r, publisher, data)) == 0
    assert ex.stats.rejected == {reason: 1}
    assert ex.available(10) == 0
    assert reason in REJECT_REASONS


def test_header_sender_and_publisher_must_be_the_signer(setup):
    hub, me, peer, clock, ex = setup
    other = Identity.generate()
    # Envelope honestly signed by peer, but the batch inside names another sender.
    ex.admit(Delivery(10, peer.peer_id, envelope(peer, encode(batch(peer, 10, sender=other.peer_id)))))
    # Published under other's key by peer.
    ex.admit(Delivery(10, other.peer_id, envelope(peer, encode(batch(peer, 10)), seq=2)))
    assert ex.stats.rejected == {"sender_mismatch": 2}


def test_replayed_envelope_is_rejected(setup):
    hub, me, peer, clock, ex = setup
    data = envelope(peer, encode(batch(peer, 10)))
    assert ex.admit(Delivery(10, peer.peer_id, data)) == 2
    assert ex.admit(Delivery(10, peer.peer_id, data)) == 0
    assert ex.stats.rejected == {"replay": 1}


def test_future_round_is_rejected(setup):
    hub, me, peer, clock, ex = setup
    ex.admit(Delivery(14, peer.peer_id, envelope(peer, encode(batch(peer, 14)))))
    assert ex.stats.rejected == {"wrong_round": 1}


def test_other_tokenizer_skips_token_checks(setup):
    hub, me, peer, clock, ex = setup
    rec = RolloutRecord("arithmetic:1:1", (999_999,), "<answer>3</answer>", (-0.2,), False)
    ex.admit(Delivery(10, peer.peer_id, envelope(peer, encode(batch(peer, 10, [rec], tokenizer_fingerprint="other")))))
    assert ex.stats.rejected == {}
    assert ex.available(10) == 1


def test_stale_groups_are_dropped_and_counted(setup):
    hub, me, peer, clock, ex = setup
    ex.admit(Delivery(10, peer.peer_id, envelope(peer, encode(batch(peer, 10)))))
    assert ex.available(10 + ex.max_round_lag) == 2
    assert ex.available(11 + ex.max_round_lag) == 0
    assert ex.stats.dropped_stale == 2


def test_take_prefers_fresh_rounds_and_spreads_across_peers(setup):
    hub, me, peer, clock, _ = setup
    ex = make_exchange(hub, me, clock, max_sender_share=1.0)  # no per-sender cap: freshness alone
    p2 = Identity.generate()
    many = [record(f"arithmetic:{i}:1") for i in range(6)]
    ex.admit(Delivery(9, peer.peer_id, envelope(peer, encode(batch(peer, 9, many)))))
    ex.admit(Delivery(10, peer.peer_id, envelope(peer, encode(batch(peer, 10, many[:2])), seq=2)))
    ex.admit(Delivery(10, p2.peer_id, envelope(p2, encode(batch(p2, 10, many[:2])))))
    picked = ex.take(4, 10)
    assert [g.round for g in picked] == [10, 10, 10, 10]
    assert {g.sender for g in picked} == {peer.peer_id, p2.peer_id}
    nxt = ex.take(3, 10)
    assert [g.round for g in nxt] == [9, 9, 9]


def test_publish_and_poll_through_the_hub():
    hub = MemoryHub()
    a, b = Identity.generate(), Identity.generate()
    clock = clock_at(5)

    async def go():
        ea, eb = make_exchange(hub, a, clock), make_exchange(hub, b, clock)
        await ea.start(), await eb.start()
        try:
            assert await ea.publish(5, 1, [record(), record("lists:3:1")])
            got = await eb.wait_for(2, time.time() + 5)
            assert got == 2
            assert await ea.wait_for(1, time.time() + 0.1) == 0  # a never receives its own
            return eb.status()
        finally:
            await ea.close(), await eb.close()

    st = asyncio.run(go())
    assert st["groups_in"] == 2 and st["peers_heard"] == 1 and st["rejected_total"] == 0


def test_restarted_node_is_not_taken_for_a_replayer(setup):
    # A restarted node has the same key but a fresh process: its sequence numbers are time-based,
    # so a receiver that remembers its old ones still admits the new envelopes.
    hub, me, peer, clock, ex = setup
    sender1 = make_exchange(MemoryHub(), peer, clock)
    ex.admit(Delivery(9, peer.peer_id, sender1.make_envelope(9, 1, [record()])))
    sender2 = make_exchange(MemoryHub(), peer, clock)
    ex.admit(Delivery(10, peer.peer_id, sender2.make_envelope(10, 1, [record("lists:1:1")])))
    assert ex.stats.rejected == {} and ex.stats.envelopes_in == 2


def test_oversized_frames_never_reach_the_node():
    hub = MemoryHub()
    a = Identity.generate()
    t = MemoryTransport(swarm="s", publisher=a.peer_id, hub=hub)
    hub.put("s", 3, "sn1attacker", b"x" * (MAX_ENVELOPE_SIZE + 1), time.time() + 60)
    assert asyncio.run(t.poll([3])) == []
    assert t.rejected == {"oversized": 1}
    with pytest.raises(ValueError, match="limit"):
        asyncio.run(t.publish(3, b"x" * (MAX_ENVELOPE_SIZE + 1), 60))


def test_heartbeats_show_who_is_alive_and_forged_ones_are_rejected():
    hub = MemoryHub()
    a, b, mallory = Identity.generate(), Identity.generate(), Identity.generate()
    clock = clock_at(5)

    async def go():
        ea, eb = make_exchange(hub, a, clock), make_exchange(hub, b, clock)
        await ea.announce(5, 2)
        # Mallory signs a heartbeat claiming to be a, and stores it under its own key.
        forged = Announcement(sender=a.peer_id, round=5, policy_version=0, model_fingerprint="m",
                              tokenizer_fingerprint=TOK_FP, created_at=time.time(), addrs=())
        hub.put("s", "peers", mallory.peer_id, envelope(mallory, encode(forged)), time.time() + 60)
        for d in await eb.transport.poll_announcements():
            eb.admit_announcement(d)
        again = await eb.transport.poll_announcements()  # unchanged heartbeats are not re-delivered
        return eb, again

    eb, again = asyncio.run(go())
    assert eb.peers_alive() == 1 and set(eb.peers) == {a.peer_id}
    assert eb.peers[a.peer_id].policy_version == 2
    assert eb.stats.rejected == {"sender_mismatch": 1}
    assert again == []


def test_a_copy_under_the_wrong_round_cannot_get_the_real_one_refused(setup):
    # The copy fails a check after the signature; the envelope must not be remembered by then.
    hub, me, peer, clock, ex = setup
    data = envelope(peer, encode(batch(peer, 10)))
    assert ex.admit(Delivery(9, peer.peer_id, data)) == 0
    assert ex.admit(Delivery(10, peer.peer_id, data)) == 2
    assert ex.stats.rejected == {"wrong_round": 1}


def test_one_batch_per_sender_and_round(setup):
    hub, me, peer, clock, ex = setup
    assert ex.admit(Delivery(10, peer.peer_id, envelope(peer, encode(batch(peer, 10)), seq=1))) == 2
    # A second, different, validly signed batch for the same round: refused, so a peer cannot
    # flood the pool or get a group trained on twice by re-sending it.
    assert ex.admit(Delivery(10, peer.peer_id, envelope(peer, encode(batch(peer, 10)), seq=2))) == 0
    assert ex.stats.rejected == {"duplicate_round": 1}
    assert ex.admit(Delivery(9, peer.peer_id, envelope(peer, encode(batch(peer, 9)), seq=3))) == 2  # another round


def test_batches_and_groups_are_capped():
    from swarm_node.node.swarm.limits import MAX_GROUPS_PER_BATCH

    hub, me, peer = MemoryHub(), Identity.generate(), Identity.generate()
    ex = make_exchange(hub, me, clock_at(10), group_cap=2)
    many = [record(f"arithmetic:{i}:1") for i in range(MAX_GROUPS_PER_BATCH + 1)]
    assert ex.admit(Delivery(10, peer.peer_id, envelope(peer, encode(batch(peer, 10, many))))) == 0
    assert ex.stats.rejected == {"too_many_groups": 1}
    five = [record("arithmetic:1:1", (i + 1,)) for i in range(5)]
    assert ex.admit(Delivery(10, peer.peer_id, envelope(peer, encode(batch(peer, 10, five)), seq=2))) == 1
    assert len(ex.take(1, 10)[0].records) == 2  # this node's group size


def test_admission_records_the_task_and_the_tokenizer_verdict_on_each_group(setup):
    # Decided once, here: the learner (node/run/rollouts.py external_samples) only reads them.
    from swarm_node.rewards.registry import make_task

    hub, me, peer, clock, ex = setup
    other = Identity.generate()
    assert ex.admit(Delivery(10, peer.peer_id, envelope(peer, encode(batch(peer, 10))))) == 2
    foreign = batch(other, 10, [record()], tokenizer_fingerprint="other-tok")
    assert ex.admit(Delivery(10, other.peer_id, envelope(other, encode(foreign)))) == 1
    groups = {(g.sender, g.task_id): g for g in ex.take(5, 10)}
    assert {k: g.token_level for k, g in groups.items()} == {
        (peer.peer_id, "arithmetic:1:1"): True, (peer.peer_id, "lists:2:1"): True,
        (other.peer_id, "arithmetic:1:1"): False}
    assert all(g.task == make_task(g.task_id) for g in groups.values())


def test_pool_is_bounded(monkeypatch):
    import swarm_node.node.swarm.pool as pool

    monkeypatch.setattr(pool, "MAX_POOL_GROUPS", 3)
    hub, me = MemoryHub(), Identity.generate()
    ex = make_exchange(hub, me, clock_at(10))
    for i in range(3):
        p = Identity.generate()
        ex.admit(Delivery(10, p.peer_id, envelope(p, encode(batch(p, 10)))))  # 2 groups each
    assert ex.available(10) == 3 and ex.stats.dropped_full == 3


def test_per_peer_counters_are_bounded(monkeypatch):
    import swarm_node.node.swarm.limits as swarm

    monkeypatch.setattr(swarm, "MAX_TRACKED_PEERS", 2)
    hub, me = MemoryHub(), Identity.generate()
    ex = make_exchange(hub, me, clock_at(10))
    for i in range(4):
        p = Identity.generate()
        ex.admit(Delivery(10, p.peer_id, envelope(p, encode(batch(p, 10)))))
    assert len(ex.stats.groups_in) == 3 and ex.stats.groups_in[swarm.OTHER_PEERS] == 4


def test_a_failing_check_is_counted_and_does_not_stop_polling(setup, monkeypatch):
    import swarm_node.node.swarm.admission as swarm

    hub, me, peer, clock, ex = setup
    real = swarm.make_task

    def flaky(task_id):  # a bug in a task family (an exception that is not a TaskError)
        if task_id.startswith("lists"):
            raise RuntimeError("bug in a generator")
        return real(task_id)

    monkeypatch.setattr(swarm, "make_task", flaky)
    hub.put("s", 10, peer.peer_id, envelope(peer, encode(batch(peer, 10))), time.time() + 60)
    p2 = Identity.generate()
    hub.put("s", 10, p2.peer_id, envelope(p2, encode(batch(p2, 10, [record()]))), time.time() + 60)
    assert asyncio.run(ex.poll_once()) == 1  # the other peer's batch still got in
    assert ex.stats.internal_errors == 1 and ex.stats.rejected == {}
    assert set(g.sender for g in ex.take(5, 10)) == {p2.peer_id}


def test_one_sender_supplies_at_most_its_share_of_a_step():
    hub, me, clock = MemoryHub(), Identity.generate(), clock_at(10)
    ex = make_exchange(hub, me, clock, max_sender_share=0.5)
    flooder, honest = Identity.generate(), Identity.generate()
    many = [record(f"arithmetic:{i}:1") for i in range(8)]
    ex.admit(Delivery(10, flooder.peer_id, envelope(flooder, encode(batch(flooder, 10, many)))))
    ex.admit(Delivery(10, honest.peer_id, envelope(honest, encode(batch(honest, 10, many[:1])))))
    picked = ex.take(4, 10)
    # ceil(4 x 0.5) = 2 from the flooder, 1 from the only other sender: 3 of 4, not 4 from one key.
    assert sorted(g.sender == flooder.peer_id for g in picked) == [False, True, True]
    assert len(ex.take(5, 10)) == 3  # next step: ceil(5 x 0.5) = 3 of the flooder's remaining 6
    one = make_exchange(hub, me, clock, max_sender_share=1.0)  # a two-node swarm's setting: one peer may fill J
    one.admit(Delivery(10, flooder.peer_id, envelope(flooder, encode(batch(flooder, 10, many)), seq=2)))
    assert len(one.take(4, 10)) == 4


def test_the_fetch_budget_is_j_groups_worth_and_admission_vouches_for_the_sender(setup):
    hub, me, peer, clock, _ = setup
    ex = make_exchange(hub, me, clock, external_groups=4)
    vouched = []
    ex.transport.vouch = vouched.append
    assert ex.envelopes_wanted() == 8  # nothing learnt yet: an envelope may hold a single group
    many = [record(f"arithmetic:{i}:1") for i in range(4)]
    ex.admit(Delivery(10, peer.peer_id, envelope(peer, encode(batch(peer, 10, many)))))
    assert vouched == [peer.peer_id]
    # 4 groups an envelope, of which one sender may give a step half of J (the config's share, 0.5): 2 x J / 2
    assert ex.envelopes_wanted() == 4
    whole = make_exchange(hub, me, clock, external_groups=4, max_sender_share=1.0)
    whole.admit(Delivery(10, peer.peer_id, envelope(peer, encode(batch(peer, 10, many)))))
    assert whole.envelopes_wanted() == 2  # a share of 1.0: all 4 usable, 2 x J / 4
    assert make_exchange(hub, me, clock).envelopes_wanted() is None  # J unknown: fetch everything


def test_records_past_the_group_size_are_neither_checked_nor_kept():
    hub, me, peer, clock = MemoryHub(), Identity.generate(), Identity.generate(), clock_at(10)
    ex = make_exchange(hub, me, clock, group_cap=2)
    bad = RolloutRecord("arithmetic:1:1", (1, 2), "not what the ids say", (-0.1, -0.1), False)
    recs = [record("arithmetic:1:1"), record("arithmetic:1:1", (4, 5)), bad]  # the third would be dropped
    assert ex.admit(Delivery(10, peer.peer_id, envelope(peer, encode(batch(peer, 10, recs))))) == 1
    assert ex.stats.rejected == {} and [len(g.records) for g in ex.take(1, 10)] == [2]


def test_a_batch_too_old_to_use_is_dropped_before_its_records_are_checked(setup):
    hub, me, peer, clock, ex = setup  # max_round_lag 4 at round 10: round 5 is out of the window
    old = batch(peer, 5, [RolloutRecord("arithmetic:1:1", (1, 2), "mismatch", (-0.1, -0.1), False)])
    assert ex.admit(Delivery(5, peer.peer_id, envelope(peer, encode(old)))) == 0
    assert ex.stats.rejected == {} and ex.stats.dropped_stale == 1


def test_admitting_a_large_batch_leaves_the_event_loop_free():
    hub, me, peer, clock = MemoryHub(), Identity.generate(), Identity.generate(), clock_at(10)
    ex = make_exchange(hub, me, clock, group_cap=64)
    ids = tuple(range(1, 40)) * 25  # ~1000 tokens a record, 64 x 8 records: a batch of a few MiB
    recs = [record(f"arithmetic:{i}:1", ids) for i in range(8) for _ in range(40)]
    data = envelope(peer, encode(batch(peer, 10, recs)))
    assert len(data) > 1 << 20

    async def go():
        ticks = 0

        async def heartbeat():  # stands for the heartbeat task and the status display
            nonlocal ticks
            while True:
                ticks += 1
                await asyncio.sleep(0)

        hb = asyncio.create_task(heartbeat())
        await asyncio.sleep(0)
        before = ticks
        n = await ex.admit_off_loop(Delivery(10, peer.peer_id, data))
        hb.cancel()
        return n, ticks - before

    admitted, ticks_during = asyncio.run(go())
    assert admitted == 8
    assert ticks_during > 1  # inline, the loop would not have run once until admission finished


def test_a_sender_whose_envelope_lies_is_distrusted_and_a_replay_is_only_counted(setup):
    hub, me, peer, clock, ex = setup
    distrusted = []
    ex.transport.distrust = lambda publisher, r: distrusted.append((publisher, r))
    _, _, bad = _reject_cases(me, peer, Identity.generate())["text_mismatch"]
    ex.admit(Delivery(10, peer.peer_id, bad))
    assert distrusted == [(peer.peer_id, 10)]  # its own signed entry announced this body
    good = envelope(peer, encode(batch(peer, 10)), seq=5)
    ex.admit(Delivery(10, peer.peer_id, good))
    ex.admit(Delivery(10, peer.peer_id, good))  # the same again: a restart can do this to an honest node
    assert ex.stats.rejected["replay"] == 1 and distrusted == [(peer.peer_id, 10)]


@pytest.mark.parametrize("groups,cap,tokens", [(64, 8, 16), (4, 128, 128), (16, 32, 64), (64, 16, 8)])
def test_usable_envelope_bytes_bounds_the_largest_envelope_a_node_could_use(groups, cap, tokens):
    from swarm_node.node.swarm.limits import MAX_TEXT_BYTES_PER_TOKEN, usable_envelope_bytes
    from swarm_node.protocol.messages import MAX_ROLLOUTS, MAX_TOKEN_ID

    peer = Identity.generate()
    family = "f" * 32
    task = f"{family}:{2**63 - 1}:" + "9" * 19  # the longest task id (72 of MAX_TASK_ID_CHARS)
    text = "é" * (tokens * MAX_TEXT_BYTES_PER_TOKEN // 2)  # 2 UTF-8 bytes each: the text bound
    recs = [RolloutRecord(task[:-1] + str(g % 10), (MAX_TOKEN_ID,) * tokens, text, (-0.123,) * tokens, False)
            for g in range(groups) for _ in range(cap)][:MAX_ROLLOUTS]  # a batch holds at most that many
    size = len(envelope(peer, encode(batch(peer, 10, recs))))
    bound = usable_envelope_bytes(tokens)  # 512 records of `tokens` tokens, whatever their groups
    assert size <= bound <= 1.2 * size  # from above, and tight enough to mean something
    assert usable_envelope_bytes(None) == MAX_ENVELOPE_SIZE


def test_completions_longer_than_the_node_trains_on_are_neither_checked_nor_kept(setup):
    hub, me, peer, clock, _ = setup
    ex = make_exchange(hub, me, clock, max_tokens=3)
    vouched = []
    ex.transport.vouch = vouched.append
    long_and_lying = RolloutRecord("arithmetic:1:1", (1, 2, 3, 4), "not what the ids say", (-0.1,) * 4, False)
    recs = [record("arithmetic:1:1"), long_and_lying, record("lists:2:1", (1, 2, 3, 4, 5))]
    assert ex.admit(Delivery(10, peer.peer_id, envelope(peer, encode(batch(peer, 10, recs))))) == 1
    assert ex.stats.rejected == {} and ex.status()["dropped_long"] == 2
    assert [len(g.records) for g in ex.take(2, 10)] == [1] and vouched == [peer.peer_id]
    # Nothing usable at all: admitted (honest, only longer), but it earns no fetch slot.
    other = Identity.generate()
    assert ex.admit(Delivery(10, other.peer_id, envelope(other, encode(batch(other, 10, [long_and_lying]))))) == 0
    assert ex.stats.rejected == {} and vouched == [peer.peer_id]
    # Another tokenizer: its tokens cannot be counted here, its text is bounded (32 bytes a token).
    foreign = Identity.generate()
    wordy = RolloutRecord("arithmetic:1:1", (1,), "x" * 97, (-0.1,), False)
    short = RolloutRecord("arithmetic:1:1", (1,), "x" * 96, (-0.1,), False)
    data = encode(batch(foreign, 10, [wordy, short], tokenizer_fingerprint="other"))
    assert ex.admit(Delivery(10, foreign.peer_id, envelope(foreign, data))) == 1
    assert ex.status()["dropped_long"] == 4


def test_bodies_larger_than_all_the_node_could_use_are_not_taken(setup):
    from swarm_node.node.swarm.limits import usable_envelope_bytes

    hub, me, peer, clock, _ = setup
    ex = make_exchange(hub, me, clock, max_tokens=4, group_cap=2)
    assert ex.max_body == usable_envelope_bytes(4)
    huge = [record(f"arithmetic:{i}:1", (1,) * 200) for i in range(64)] * 8  # valid, and far too much
    data = envelope(peer, encode(batch(peer, 10, huge)))
    assert ex.max_body < len(data) < MAX_ENVELOPE_SIZE
    hub.put("s", 10, peer.peer_id, data, time.time() + 60)
    assert asyncio.run(ex.poll_once()) == 0
    assert ex.transport.rejected == {"oversized": 1} and ex.stats.envelopes_in == 0
