"""Signed envelopes: wire round trip, and every rejection reason of the Verifier."""

from __future__ import annotations

import random
import struct
from dataclasses import replace

import pytest

from swarm_node.protocol.identity import Identity
from swarm_node.protocol.signing import (
    MAX_PAYLOAD_SIZE,
    Envelope,
    SigningError,
    Verifier,
    VerifyResult,
    canonical_bytes,
    envelope_from_bytes,
    envelope_to_bytes,
    sign,
)

NOW = 1_700_000_000.0


@pytest.fixture(scope="module")
def alice() -> Identity:
    return Identity.generate()


@pytest.fixture(scope="module")
def bob() -> Identity:
    return Identity.generate()


def _flip(data: bytes, index: int) -> bytes:
    out = bytearray(data)
    out[index] ^= 0x01
    return bytes(out)


def test_round_trip_accepted(alice: Identity) -> None:
    env = sign(b"\x82\xa4rollout", alice, seq=1, now=NOW)
    assert env.sender == alice.peer_id and len(env.nonce) == 16 and len(env.signature) == 64
    parsed = envelope_from_bytes(envelope_to_bytes(env))
    assert parsed == env
    assert Verifier().verify(parsed, now=NOW + 1) is VerifyResult.ACCEPTED


def test_empty_payload_accepted(alice: Identity) -> None:
    env = sign(b"", alice, seq=0, now=NOW)
    assert Verifier().verify(envelope_from_bytes(envelope_to_bytes(env)), now=NOW) is VerifyResult.ACCEPTED


def test_nonces_are_fresh(alice: Identity) -> None:
    assert sign(b"x", alice, 1, NOW).nonce != sign(b"x", alice, 1, NOW).nonce


def test_flipped_payload_byte_bad_signature(alice: Identity) -> None:
    env = sign(b"hello world", alice, seq=1, now=NOW)
    data = envelope_to_bytes(env)
    payload_at = data.index(b"hello world")
    tampered = envelope_from_bytes(_flip(data, payload_at + 3))
    assert tampered is not None and tampered.payload != env.payload
    assert Verifier().verify(tampered, now=NOW) is VerifyResult.BAD_SIGNATURE


def test_flipped_signature_bad_signature(alice: Identity) -> None:
    env = sign(b"hello", alice, seq=1, now=NOW)
    tampered = envelope_from_bytes(_flip(envelope_to_bytes(env), -1))
    assert tampered is not None
    assert Verifier().verify(tampered, now=NOW) is VerifyResult.BAD_SIGNATURE


@pytest.mark.parametrize("field_name,value", [("seq", 2), ("timestamp", NOW + 1.0)])
def test_tampered_header_bad_signature(alice: Identity, field_name: str, value: object) -> None:
    env = replace(sign(b"hello", alice, seq=1, now=NOW), **{field_name: value})
    assert Verifier().verify(env, now=NOW) is VerifyResult.BAD_SIGNATURE


def test_resigned_by_other_key_claiming_sender_id(alice: Identity, bob: Identity) -> None:
    # Bob signs a rollout with his own key but claims Alice's peer id: the signature is
    # valid for Bob's key, yet Alice's id does not derive from it.
    env = sign(b"rollout", bob, seq=1, now=NOW)
    msg = canonical_bytes(alice.peer_id, bob.public_key_bytes, env.seq, env.nonce, env.timestamp, env.payload)
    forged = replace(env, sender=alice.peer_id, signature=bob.sign(msg))
    assert Verifier().verify(forged, now=NOW) is VerifyResult.SENDER_MISMATCH


def test_swapped_public_key(alice: Identity, bob: Identity) -> None:
    env = sign(b"rollout", alice, seq=1, now=NOW)
    # Only the key swapped: Alice's id no longer derives from the key -> SENDER_MISMATCH
    # (checked before the signature, so the result names the real problem).
    assert Verifier().verify(replace(env, public_key=bob.public_key_bytes), now=NOW) is (
        VerifyResult.SENDER_MISMATCH
    )
    # Key and id both swapped to Bob's (consistent), signature still Alice's: the signature
    # does not verify under Bob's key (and the key/id are in the signed bytes) -> BAD_SIGNATURE.
    swapped = replace(env, sender=bob.peer_id, public_key=bob.public_key_bytes)
    assert Verifier().verify(swapped, now=NOW) is VerifyResult.BAD_SIGNATURE
    # Bob signing with his key but Alice's id and key in the envelope: BAD_SIGNATURE.
    msg = canonical_bytes(env.sender, env.public_key, env.seq, env.nonce, env.timestamp, env.payload)
    assert Verifier().verify(replace(env, signature=bob.sign(msg)), now=NOW) is VerifyResult.BAD_SIGNATURE


def test_same_envelope_twice_is_replay(alice: Identity) -> None:
    verifier = Verifier()
    env = sign(b"x", alice, seq=5, now=NOW)
    assert verifier.verify(env, now=NOW) is VerifyResult.ACCEPTED
    assert verifier.verify(env, now=NOW) is VerifyResult.REPLAY
    # Same seq with a fresh nonce (re-signed) is still a replay of seq 5.
    assert verifier.verify(sign(b"x", alice, seq=5, now=NOW), now=NOW) is VerifyResult.REPLAY
    # Out-of-order but new seqs are fine; a different verifier has no memory.
    assert verifier.verify(sign(b"x", alice, seq=3, now=NOW), now=NOW) is VerifyResult.ACCEPTED
    assert verifier.verify(sign(b"x", alice, seq=6, now=NOW), now=NOW) is VerifyResult.ACCEPTED
    assert Verifier().verify(env, now=NOW) is VerifyResult.ACCEPTED


def test_reused_nonce_is_replay(alice: Identity) -> None:
    verifier = Verifier()
    first = sign(b"x", alice, seq=1, now=NOW)
    assert verifier.verify(first, now=NOW) is VerifyResult.ACCEPTED
    msg = canonical_bytes(first.sender, first.public_key, 2, first.nonce, first.timestamp, first.payload)
    again = replace(first, seq=2, signature=alice.sign(msg))
    assert verifier.verify(again, now=NOW) is VerifyResult.REPLAY


def test_replay_window_is_bounded(alice: Identity) -> None:
    verifier = Verifier(replay_window=4)
    for seq in range(10, 20):
        assert verifier.verify(sign(b"x", alice, seq, NOW), now=NOW) is VerifyResult.ACCEPTED
    state = verifier._senders[alice.peer_id]
    assert list(state.seqs) == [16, 17, 18, 19] and len(state.nonces) == 4
    # Older than everything remembered: cannot be proven fresh -> REPLAY.
    assert verifier.verify(sign(b"x", alice, 12, NOW), now=NOW) is VerifyResult.REPLAY


def test_sender_lru_is_bounded() -> None:
    verifier = Verifier(max_senders=3)
    ids = [Identity.generate() for _ in range(5)]
    for ident in ids:
        assert verifier.verify(sign(b"x", ident, 1, NOW), now=NOW) is VerifyResult.ACCEPTED
    assert list(verifier._senders) == [i.peer_id for i in ids[2:]]


@pytest.mark.parametrize("offset", [60.0, -60.0])
def test_clock_skew_is_stale(alice: Identity, offset: float) -> None:
    env = sign(b"x", alice, seq=1, now=NOW + offset)
    assert Verifier().verify(env, now=NOW) is VerifyResult.STALE_CLOCK
    assert Verifier(max_skew_s=120).verify(env, now=NOW) is VerifyResult.ACCEPTED


def test_malformed_envelope_objects(alice: Identity) -> None:
    env = sign(b"x", alice, seq=1, now=NOW)
    verifier = Verifier()
    for bad in [
        replace(env, signature=env.signature[:63]),
        replace(env, nonce=b"\0" * 15),
        replace(env, public_key=env.public_key + b"\0"),
        replace(env, seq=-1),
        replace(env, seq=True),
        replace(env, timestamp=float("nan")),
        replace(env, payload="str"),
        replace(env, sender="é"),
        None,
        "not an envelope",
    ]:
        assert verifier.verify(bad, now=NOW) is VerifyResult.MALFORMED  # type: ignore[arg-type]


def test_malformed_bytes_rejected(alice: Identity) -> None:
    data = envelope_to_bytes(sign(b"payload", alice, seq=1, now=NOW))
    assert envelope_from_bytes(b"") is None
    assert envelope_from_bytes(b"garbage" * 40) is None
    assert envelope_from_bytes(random.Random(0).randbytes(500)) is None
    assert envelope_from_bytes(data + b"\0") is None  # trailing bytes
    assert envelope_from_bytes(b"XXXX" + data[4:]) is None  # bad magic
    for cut in range(len(data)):
        assert envelope_from_bytes(data[:cut]) is None
    # Payload length field: oversized, and merely inconsistent with the frame.
    sender_len = struct.unpack_from(">H", data, 4)[0]
    len_at = 4 + 2 + sender_len + 32 + 8 + 16 + 8
    for declared in (MAX_PAYLOAD_SIZE + 1, 0xFFFFFFFF, 6, 8):
        bad = data[:len_at] + struct.pack(">I", declared) + data[len_at + 4:]
        assert envelope_from_bytes(bad) is None
    # Sender length field: zero and over the cap.
    for declared in (0, 0xFFFF):
        assert envelope_from_bytes(data[:4] + struct.pack(">H", declared) + data[6:]) is None
    assert envelope_from_bytes(None) is None  # type: ignore[arg-type]


def test_sign_rejects_bad_local_input(alice: Identity) -> None:
    with pytest.raises(SigningError):
        sign(b"x" * (MAX_PAYLOAD_SIZE + 1), alice, seq=1, now=NOW)
    with pytest.raises(SigningError):
        sign(b"x", alice, seq=-1, now=NOW)
    with pytest.raises(SigningError):
        envelope_to_bytes(replace(sign(b"x", alice, 1, NOW), nonce=b""))


def test_counts_by_reason(alice: Identity, bob: Identity) -> None:
    verifier = Verifier()
    env = sign(b"x", alice, seq=1, now=NOW)
    verifier.verify(env, now=NOW)
    verifier.verify(env, now=NOW)
    verifier.verify(replace(env, seq=2), now=NOW)
    verifier.verify(replace(env, public_key=bob.public_key_bytes), now=NOW)
    verifier.verify(sign(b"x", alice, seq=9, now=NOW - 100), now=NOW)
    verifier.verify(replace(env, nonce=b""), now=NOW)
    assert verifier.counts == {
        "ACCEPTED": 1, "REPLAY": 1, "BAD_SIGNATURE": 1,
        "SENDER_MISMATCH": 1, "STALE_CLOCK": 1, "MALFORMED": 1,
    }
    assert VerifyResult.REPLAY == "REPLAY"


def test_fuzz_mutations_never_raise(alice: Identity) -> None:
    rng = random.Random(1234)
    data = envelope_to_bytes(sign(b"\x93\x01\x02\x03 some rollout payload", alice, seq=7, now=NOW))
    verifier = Verifier()
    results: set[VerifyResult] = set()
    for _ in range(2000):
        buf = bytearray(data)
        for _ in range(rng.randint(1, 4)):
            op = rng.randrange(4)
            if op == 0 and buf:  # flip a bit
                i = rng.randrange(len(buf))
                buf[i] ^= 1 << rng.randrange(8)
            elif op == 1 and buf:  # overwrite a byte
                buf[rng.randrange(len(buf))] = rng.randrange(256)
            elif op == 2:  # truncate
                del buf[rng.randrange(len(buf) + 1):]
            else:  # insert junk
                i = rng.randrange(len(buf) + 1)
                buf[i:i] = rng.randbytes(rng.randint(1, 8))
        env = envelope_from_bytes(bytes(buf))
        if env is not None:
            assert isinstance(env, Envelope)
            result = verifier.verify(env, now=NOW)
            results.add(result)
            # Only a mutation that cancelled itself out (same bytes) may be accepted, and then
            # only once: the verifier remembers it, so later identical ones are replays.
            if result is VerifyResult.ACCEPTED:
                assert bytes(buf) == data
    assert verifier.counts["ACCEPTED"] <= 1
    assert VerifyResult.BAD_SIGNATURE in results  # some mutations parse and get a verdict


def test_replay_memory_holds_only_the_clock_window(alice: Identity, bob: Identity) -> None:
    """Ten hours of two envelopes a minute from a sender: what is remembered is the last
    max_skew_s seconds' worth, not the run's; a forgotten envelope sent again is refused by the
    clock, one still inside the window as a replay; a sender gone quiet is swept away."""
    verifier = Verifier(max_skew_s=60.0)
    verifier.SWEEP_EVERY = 64
    assert verifier.verify(sign(b"x", bob, 1, NOW), now=NOW) is VerifyResult.ACCEPTED  # then quiet
    sent = []
    for i in range(1200):
        now = NOW + 30.0 * i
        sent.append(sign(b"x", alice, i, now))
        assert verifier.verify(sent[-1], now=now) is VerifyResult.ACCEPTED
        assert len(verifier._senders[alice.peer_id].seqs) <= 3  # 60 s of envelopes every 30 s, and this one
    assert verifier.remembered() <= 3 and bob.peer_id not in verifier._senders
    assert verifier.verify(sent[0], now=now) is VerifyResult.STALE_CLOCK
    assert verifier.verify(sent[-2], now=now) is VerifyResult.REPLAY


def test_forgotten_envelopes_never_come_back_as_new(alice: Identity) -> None:
    """Forgetting by time must not reopen a replay: not when this machine's clock steps back,
    not when commit() is called with another clock than verify(), not when a sender's seqs and
    timestamps disagree (its clock stepped back) and the window pushed a seq out."""
    v = Verifier(max_skew_s=30.0)
    e1 = sign(b"a", alice, 1, 1000.0)
    assert v.verify(e1, now=1000.0) is VerifyResult.ACCEPTED
    assert v.verify(sign(b"b", alice, 2, 1031.0), now=1031.0) is VerifyResult.ACCEPTED  # e1 forgotten
    assert v.verify(e1, now=1010.0) is VerifyResult.STALE_CLOCK  # the clock stepped back 21 s

    v = Verifier(max_skew_s=30.0)
    e = sign(b"x", alice, 1, 1000.0)
    assert v.verify(e, now=1000.0, commit=False) is VerifyResult.ACCEPTED
    assert v.commit(e)  # with the wall clock: e is forgotten at once
    assert v.verify(e, now=1000.0) is not VerifyResult.ACCEPTED

    v = Verifier(max_skew_s=30.0, replay_window=3)
    e1 = sign(b"1", alice, 1, 1020.0)
    for e in (e1, sign(b"2", alice, 2, 971.0), sign(b"3", alice, 3, 972.0), sign(b"4", alice, 4, 1000.0)):
        assert v.verify(e, now=1000.0) is VerifyResult.ACCEPTED  # the window of 3 pushes seq 1 out
    assert v.verify(sign(b"5", alice, 5, 1003.0), now=1003.0) is VerifyResult.ACCEPTED  # 2 and 3 go too
    assert v.verify(e1, now=1003.0) is VerifyResult.REPLAY


def test_verify_and_commit_from_many_threads_lose_nothing() -> None:
    """Admission verifies in worker threads while the loop commits: the one envelope each of 8
    threads races to accept is accepted exactly once, and every count is kept."""
    import threading

    idents = [Identity.generate() for _ in range(4)]
    envs = [sign(b"x", idents[i % 4], seq=i, now=NOW) for i in range(400)]
    verifier = Verifier(replay_window=1000)
    results: list[VerifyResult] = []
    lock = threading.Lock()
    barrier = threading.Barrier(8)

    def worker() -> None:
        barrier.wait()
        mine = [verifier.verify(env, now=NOW) for env in envs]  # every thread tries every envelope
        with lock:
            results.extend(mine)

    threads = [threading.Thread(target=worker) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert results.count(VerifyResult.ACCEPTED) == 400  # each once, by whichever thread came first
    assert results.count(VerifyResult.REPLAY) == 7 * 400
    assert verifier.counts == {VerifyResult.ACCEPTED.value: 400, VerifyResult.REPLAY.value: 2800}
    assert verifier.remembered() == 400


def test_next_seq_grows_and_follows_the_clock():
    import time

    from swarm_node.protocol.signing import next_seq

    now_us = time.time_ns() // 1000
    assert next_seq(0) >= now_us  # a fresh process starts at the clock, past any number it used before
    far = now_us + 10**9
    assert next_seq(far) == far + 1  # and never goes back, even when the clock is behind


def test_verify_fresh_rechecks_clock_and_replay_but_not_the_signature(alice: Identity) -> None:
    """For an envelope whose signature was accepted before (a cached gossip verdict): the clock
    and replay checks run again, counted as verify counts them; the signature is not re-checked
    and nothing is remembered."""
    v = Verifier(max_skew_s=30.0)
    env = sign(b"x", alice, 1, NOW)
    assert v.verify(env, now=NOW, commit=False) is VerifyResult.ACCEPTED
    checked = []
    real = v._check_signed
    v._check_signed = lambda e: checked.append(e) or real(e)  # type: ignore[method-assign]
    assert v.verify_fresh(env, now=NOW + 30.0) is VerifyResult.ACCEPTED  # at the clock window's edge
    assert v.verify_fresh(env, now=NOW + 30.5) is VerifyResult.STALE_CLOCK  # past it: as verify says
    assert v.verify(env, now=NOW + 30.5, commit=False) is VerifyResult.STALE_CLOCK
    assert len(checked) == 1  # only verify checked the signature
    assert v.remembered() == 0  # verify_fresh remembers nothing
    assert v.commit(env, now=NOW)
    assert v.verify_fresh(env, now=NOW) is VerifyResult.REPLAY  # remembered since the first verdict
    assert v.verify_fresh(replace(env, nonce=b"")) is VerifyResult.MALFORMED  # never raises
    assert v.counts == {"ACCEPTED": 2, "STALE_CLOCK": 2, "REPLAY": 1, "MALFORMED": 1}
