"""A hivemind host's serve slots cannot be held by a few trickling peers, and a reader that could
not download a known publisher's body rests it instead of forgetting its history
(node/transport/hivemind/serve_slots.py, rollout_stream.py ``read_request``, fetcher.py).

Before: 16 slots in all, none per peer, and a request read with 10 s per read (three reads: ~30 s a
trickling stream); 16 such streams turned every honest download away, and after 3 failed fetches
every reader called ``standing.forget`` on the victim (50 rounds of history -> 3)."""

from __future__ import annotations

import asyncio
import collections
import hashlib
import random
import struct
import time
from types import SimpleNamespace

import pytest

from swarm_node.node.transport.hivemind.fetch_budget import MAX_FETCH_FAILURES
from swarm_node.node.transport.hivemind.fetcher import REST_ROUNDS, Fetcher
from swarm_node.node.transport.hivemind.rollout_stream import REQUEST_TIMEOUT_S, read_request
from swarm_node.node.transport.hivemind.serve_slots import PER_PEER, TOTAL, ServeSlots
from swarm_node.node.transport.hivemind.transport import HivemindTransport
from swarm_node.protocol.identity import Identity

HOST = "Qm" + "h" * 44


def test_a_peer_gets_at_most_its_share_of_the_slots_and_the_total_is_bounded():
    s = ServeSlots()
    assert [s.take("a") for _ in range(PER_PEER + 1)] == [True] * PER_PEER + [False]
    assert s.take("b")  # another peer is still served
    s.give("a")
    assert s.take("a")
    peers = [f"p{i}" for i in range(TOTAL)]
    taken = sum(s.take(p) for p in peers for _ in range(PER_PEER))
    assert taken == TOTAL - (PER_PEER + 1) and not s.take("late")
    for p in ("a", "a", "b"):
        s.give(p)
    assert "a" not in s.held and "b" not in s.held  # only peers holding a slot are remembered


def test_a_request_trickled_a_byte_at_a_time_is_cut_off_at_the_total_deadline():
    """Each byte arrives well within the old per-read timeout (10 s), so only a deadline on the
    whole request ends the stream."""

    async def main():
        reader = asyncio.StreamReader()

        async def trickle():
            request = struct.pack(">Q", 7) + bytes([50]) + b"x" * 50
            for b in request:
                reader.feed_data(bytes([b]))
                await asyncio.sleep(0.25)  # the attack: a few bytes a second

        feeder = asyncio.create_task(trickle())
        start = time.monotonic()
        with pytest.raises(asyncio.TimeoutError):
            await asyncio.wait_for(read_request(reader), REQUEST_TIMEOUT_S + 8)  # old code: ~15 s, then done
        feeder.cancel()
        return time.monotonic() - start

    assert asyncio.run(main()) < REQUEST_TIMEOUT_S + 1


class _Writer:
    def __init__(self):
        self.data, self.closed = b"", False

    def write(self, b):
        self.data += b

    async def drain(self):
        pass

    def close(self):
        self.closed = True


def test_a_peer_holding_its_share_of_slots_does_not_keep_another_peers_download_out():
    me = Identity.generate()
    t = HivemindTransport(swarm="t", publisher=me.peer_id, signer=me)
    t._outbox.keep(7, b"body", 0.0, 1e12)

    async def main():
        stalled = [asyncio.create_task(t._serve(SimpleNamespace(peer_id="evil"), asyncio.StreamReader(), _Writer()))
                   for _ in range(PER_PEER)]
        while sum(t._slots.held.values()) < PER_PEER:  # the stalled streams hold their slots
            await asyncio.sleep(0)
        third = _Writer()
        await t._serve(SimpleNamespace(peer_id="evil"), asyncio.StreamReader(), third)  # turned away at once
        assert third.closed and third.data == b"" and t._slots.refused == 1
        honest, w = asyncio.StreamReader(), _Writer()
        name = me.peer_id.encode()
        honest.feed_data(struct.pack(">Q", 7) + bytes([len(name)]) + name)
        honest.feed_eof()
        await t._serve(SimpleNamespace(peer_id="honest"), honest, w)
        assert w.data == struct.pack(">Q", 4) + b"body"
        await asyncio.wait_for(asyncio.gather(*stalled), REQUEST_TIMEOUT_S + 2)  # cut off at the deadline
        assert not t._slots.held

    asyncio.run(main())


def test_a_known_publisher_given_up_is_rested_for_a_few_rounds_and_keeps_its_history():
    f = Fetcher("me", collections.Counter())
    for now in range(50):
        f.admitted("victim", now, now)
    history = list(f.standing.vouched["victim"])
    entry = {"victim": {"p2p": HOST, "size": 10, "sha256": "a" * 64}}

    async def unanswered(peer, round, publisher, declared):
        raise ConnectionError("its host's serve slots are full")

    rng, clock = random.Random(0), iter(range(0, 10_000, 10))

    def poll(r):  # the transport reads round r's shard, then hands its entries to the fetcher
        assert f.budget.due([r], 2, len(f.known), next(clock), 5.0) == [r]
        return f.start_round(r, entry, 2, 1 << 20, rng, set, unanswered)

    async def main():
        for _ in range(MAX_FETCH_FAILURES):  # retried on the next polls, then given up
            tasks = poll(50)
            assert len(tasks) == 1
            await asyncio.gather(*tasks)
        assert f.fetch_failures == 1
        assert f.standing.vouched["victim"] == history  # old code: forgotten, 50 rounds -> start over
        for r in range(51, 50 + REST_ROUNDS + 1):  # rested ...
            assert poll(r) == []
        tasks = poll(51 + REST_ROUNDS)  # ... then fetched again
        assert len(tasks) == 1
        await asyncio.gather(*tasks)
        f.forget_before(60)
        assert f.resting == {}

    asyncio.run(main())


def test_a_reader_keeps_within_a_hosts_share_of_streams_and_fetches_the_rest_later():
    """A reader catching up on several rounds of one publisher would open a stream per round; past
    the host's share the host turns the rest away and the reader would count failures (an
    unknown publisher backed off). It opens PER_PEER at once; later polls fetch the rest."""
    f = Fetcher("me", collections.Counter())
    gate = asyncio.Event()
    body = b"x" * 10
    entry = {"pub": {"p2p": HOST, "size": len(body), "sha256": hashlib.sha256(body).hexdigest()}}

    async def download(peer, round, publisher, declared):
        await gate.wait()
        return body

    async def main():
        rounds = range(10, 14)
        started = []
        for r in rounds:
            f.budget.due([r], None, 0, 0.0, 5.0)
            started += f.start_round(r, entry, None, 1 << 20, random.Random(0), set, download)
        assert len(started) == PER_PEER and f.from_host(HOST) == PER_PEER
        gate.set()
        await asyncio.gather(*started)
        assert not f.inflight and not f.backed_off and f.fetch_failures == 0
        later = []
        for r in rounds:  # the next poll
            f.budget.due([r], None, 0, 1.0, 5.0)
            later += f.start_round(r, entry, None, 1 << 20, random.Random(0), set, download)
        await asyncio.gather(*later)
        assert sorted(d.round for d in f.take_ready()) == list(rounds)

    asyncio.run(main())
