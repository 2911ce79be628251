"""Splitting a body into parts and putting it back together, with hand-checked sizes and bounds."""

from __future__ import annotations

import random

import pytest

from swarm_node.node.transport.mqtt.parts import HEADER_SIZE, NoRoom, PartError, Reassembler, TooLarge, parse_part, split


def test_split_sizes_and_order_free_reassembly():
    body = bytes(range(256)) * 40  # 10240 bytes
    parts = split(body, 1024 + HEADER_SIZE)
    assert len(parts) == 10 and all(len(p) == 1024 + HEADER_SIZE for p in parts)
    r = Reassembler(max_bytes=1 << 20)
    order = list(range(10))
    random.Random(0).shuffle(order)
    got = [r.add("s", parse_part(parts[i]), 1 << 20) for i in order]
    assert got[:-1] == [None] * 9 and got[-1] == body
    assert r.held == 0 and len(r) == 0


def test_last_part_is_the_remainder_and_a_small_body_is_one_part():
    body = b"x" * 2500
    parts = split(body, 1000 + HEADER_SIZE)
    assert [len(p) - HEADER_SIZE for p in parts] == [1000, 1000, 500]
    assert len(split(b"abc", 1000)) == 1 and parse_part(split(b"abc", 1000)[0]).data == b"abc"
    assert parse_part(split(b"", 1000)[0]).total == 0


def test_duplicates_are_ignored_and_a_new_body_replaces_a_partial_one():
    a, b = b"a" * 3000, b"b" * 3000
    pa, pb = split(a, 1000 + HEADER_SIZE), split(b, 1000 + HEADER_SIZE)
    r = Reassembler(max_bytes=1 << 20)
    assert r.add("s", parse_part(pa[0]), 10_000) is None
    assert r.add("s", parse_part(pa[0]), 10_000) is None  # QoS 1 may deliver twice
    assert r.held == 1000
    assert r.add("s", parse_part(pb[0]), 10_000) is None  # the publisher republished its round
    assert r.held == 1000
    assert r.add("s", parse_part(pa[1]), 10_000) is None  # a straggler of the old body restarts it...
    for p in pb:
        got = r.add("s", parse_part(p), 10_000)
    assert got == b  # ... and the newest whole body still comes out


def test_declared_total_over_the_limit_is_refused_before_anything_is_kept():
    parts = split(b"z" * 5000, 1000 + HEADER_SIZE)
    r = Reassembler(max_bytes=1 << 20)
    with pytest.raises(TooLarge):
        r.add("s", parse_part(parts[0]), 4999)
    assert r.held == 0 and len(r) == 0


def test_the_budget_counts_bytes_held_not_declared_and_expiry_frees_them():
    r = Reassembler(max_bytes=2500, max_age=5.0)
    a = split(b"1" * 6000, 1000 + HEADER_SIZE)
    b = split(b"2" * 6000, 1000 + HEADER_SIZE)
    r.add("a", parse_part(a[0]), 1 << 20, now=0.0, owner="A")
    r.add("b", parse_part(b[0]), 1 << 20, now=0.0, owner="B")
    assert r.held == 2000  # two first parts declaring 6000 bytes each hold 1000 each
    with pytest.raises(NoRoom):
        r.add("a", parse_part(a[1]), 1 << 20, now=1.0, owner="A")
    assert r.add("a", parse_part(a[1]), 1 << 20, now=6.0, owner="A") is None  # both expired: room again
    assert r.held == 1000 and len(r) == 1


def test_an_owner_holds_two_partial_bodies_at_most_and_strangers_make_room_for_the_vouched():
    r = Reassembler(max_bytes=3000)
    bodies = [split(bytes([k]) * 3000, 1000 + HEADER_SIZE) for k in range(4)]
    for k in range(3):  # a third body of one owner pushes out its oldest
        r.add(("A", k), parse_part(bodies[k][0]), 1 << 20, owner="A")
    assert sorted(r._partial) == [("A", 1), ("A", 2)] and r.held == 2000
    r.add(("B", 0), parse_part(bodies[3][0]), 1 << 20, owner="B")
    assert r.held == 3000
    with pytest.raises(NoRoom):  # full, and nobody may be evicted for a stranger
        r.add(("B", 0), parse_part(bodies[3][1]), 1 << 20, owner="B")
    vouched = {"B"}
    assert r.add(("B", 0), parse_part(bodies[3][1]), 1 << 20, owner="B",
                 may_evict=lambda o: o not in vouched) is None
    assert ("A", 1) not in r._partial and r.held == 3000  # A's oldest made room for B's part


def test_parts_that_do_not_hash_to_their_digest_are_refused():
    parts = split(b"q" * 3000, 1000 + HEADER_SIZE)
    forged = bytearray(parts[2])
    forged[-1] ^= 1
    r = Reassembler(max_bytes=1 << 20)
    r.add("s", parse_part(parts[0]), 1 << 20)
    r.add("s", parse_part(parts[1]), 1 << 20)
    with pytest.raises(PartError, match="digest"):
        r.add("s", parse_part(bytes(forged)), 1 << 20)
    assert r.held == 0


@pytest.mark.parametrize("payload", [b"", b"short", b"xxxx" + bytes(40), split(b"abc", 100)[0] + b"extra"])
def test_malformed_parts_raise(payload):
    with pytest.raises(PartError):
        parse_part(payload)


def test_parts_claiming_more_bytes_than_their_total_are_refused():
    parts = split(b"w" * 3000, 1000 + HEADER_SIZE)
    r = Reassembler(max_bytes=1 << 20)
    r.add("s", parse_part(parts[0]), 1 << 20)
    r.add("s", parse_part(parts[1]), 1 << 20)
    # A last part of 1001 bytes would make 3001 of a declared 3000: refused, and the body dropped.
    with pytest.raises(PartError, match="more than"):
        r.add("s", parse_part(parts[2][:HEADER_SIZE] + b"w" * 1001), 1 << 20)
    assert r.held == 0 and len(r) == 0
