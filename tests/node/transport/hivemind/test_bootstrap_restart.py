"""A restarted bootstrap peer learns the swarm again from its nodes, so a node that joins through
it afterwards trains with the swarm, not in a second one beside it (the soak's finding), and the
rule that decides when a missing bootstrap is pinged (node/transport/hivemind/bootstrap_watch.py)."""

from __future__ import annotations

import asyncio
import time

import pytest

from swarm_node.node.transport.hivemind.bootstrap_watch import BootstrapWatch
from swarm_node.node.transport.hivemind.daemon import start_dht_node
from swarm_node.node.transport.hivemind.records import bootstrap_validator
from tests.helpers.hivemind_dht import LOOPBACK, _now_round, _transport, pid

A = "/ip4/10.0.0.1/tcp/1/p2p/QmYyQSo1c1Ym7orWxLYvCrM2EmxFTANf8wXmmE7DWjhx5N"
A2 = "/ip4/10.0.0.2/tcp/1/p2p/QmYyQSo1c1Ym7orWxLYvCrM2EmxFTANf8wXmmE7DWjhx5N"  # the same peer, another address
B = "/ip4/10.0.0.3/tcp/1/p2p/QmcgpsyWgH8Y8ajJz1Cu72KnS5uo2Aa2LpzU7kinSupNKC"
PA, PB = A.rsplit("/", 1)[1], B.rsplit("/", 1)[1]


def test_a_missing_bootstrap_is_pinged_at_once_then_with_a_growing_wait_until_it_is_known_again():
    w = BootstrapWatch([A, A2, B], period=30, max_wait=100)
    assert w.peers() == {PA: ["/ip4/10.0.0.1/tcp/1", "/ip4/10.0.0.2/tcp/1"], PB: ["/ip4/10.0.0.3/tcp/1"]}
    known = {PA: True, PB: True}
    assert w.due(0, known.get) == []  # both in the routing table: their own traffic introduces us
    known[PA] = False
    assert w.due(10, known.get) == [PA]  # found missing: ping now
    assert w.due(39, known.get) == []  # then wait 30 s
    assert w.due(40, known.get) == [PA]
    assert w.due(99, known.get) == []  # 60 s
    assert w.due(100, known.get) == [PA]
    assert w.due(199, known.get) == []  # 120 s capped at 100
    assert w.due(200, known.get) == [PA]
    known[PA] = True
    assert w.due(210, known.get) == []  # back: forgotten ...
    known[PA] = False
    assert w.due(211, known.get) == [PA]  # ... so a new absence starts from the first wait
    assert w.due(240, known.get) == []


def test_a_relayed_bootstrap_is_the_peer_after_the_circuit_and_this_node_is_never_its_own_bootstrap():
    via = f"/ip4/10.0.0.9/tcp/4001/p2p/{PB}/p2p-circuit/p2p/{PA}"  # PA reached through relay PB
    # The peer is the last /p2p/ part; p2pd cannot dial a circuit address handed to connect, so
    # none is given (the daemon finds the route; the ping still goes).
    assert BootstrapWatch([via]).peers() == {PA: []}
    assert BootstrapWatch([A, B], own=PA).peers() == {PB: ["/ip4/10.0.0.3/tcp/1"]}


def test_a_ping_is_counted_when_answered_and_each_absence_is_said_once(caplog):
    w = BootstrapWatch([A], period=30)
    w.due(0, lambda p: False)
    with caplog.at_level("INFO", logger="swarm_node.node.transport.hivemind.transport"):
        w.answered(PA, False)
        w.answered(PA, False)
        w.answered(PA, True)
    assert w.reintroduced == 1
    assert sum("not answering" in r.message for r in caplog.records) == 1
    assert not any("answers again" in r.message for r in caplog.records)  # this absence was said already


async def _boot(port: int, key):
    # As `swarm-node bootstrap` runs it, restartable on the same address with the same key.
    node = await start_dht_node(initial_peers=[], retries=0, record_validator=bootstrap_validator(),
                                identity_path=str(key), **dict(LOOPBACK, host_maddrs=[f"/ip4/127.0.0.1/tcp/{port}"]))
    return node, [str(m) for m in await node.p2p.get_visible_maddrs()]


async def _first_delivery(t, rounds, timeout: float) -> list:
    end = time.monotonic() + timeout
    got: list = []
    while not got and time.monotonic() < end:
        got = await t.poll(rounds)
        await asyncio.sleep(0.5)
    return got


@pytest.mark.daemon
@pytest.mark.parametrize("watch", [True, False], ids=["watching", "not watching"])
def test_a_node_joining_through_a_restarted_bootstrap_finds_the_swarm(tmp_path, watch):
    """a and b are in the swarm; the bootstrap goes away long enough for both to drop it from their
    routing tables, and comes back empty; c joins through it alone. With the watch, a and b
    introduce themselves again and c gets a's rollouts; without it (the check is what it fixes)
    c is in a swarm of its own."""
    R = _now_round()
    period = 1.0 if watch else 10_000.0

    async def go():
        boot, maddrs = await _boot(0, tmp_path / "key")
        port = int(maddrs[0].split("/tcp/")[1].split("/")[0])
        a, b = (_transport(pid(n), maddrs, bootstrap_check_s=period) for n in ("a", "b"))
        c = None
        try:
            await a.start(), await b.start()
            if watch:  # a restarted transport (the link's rejoin) watches again
                before = a._watch
                await a.restart()
                assert a._watch is not before and before.done() and not a._watch.done()
            gone = boot.p2p.peer_id
            await boot.shutdown()
            end = time.monotonic() + 120
            while any(t._node.protocol.routing_table.get(peer_id=gone) for t in (a, b)):
                assert time.monotonic() < end, "a and b kept the stopped bootstrap in their routing tables"
                for t in (a, b):  # requests to it fail: each drops it
                    await t.publish(R, b"x" * 100, expires_in=60)
                    await t.poll([R])
            boot, again = await _boot(port, tmp_path / "key")
            assert again == maddrs  # the same address and key, as a restart keeps them
            if watch:  # the watch's ping put a (and b) back into the restarted bootstrap's table
                end = time.monotonic() + 120
                while len(boot.protocol.routing_table.uid_to_peer_id) < 2:
                    assert time.monotonic() < end, "a and b never introduced themselves to the restarted bootstrap"
                    await asyncio.sleep(0.2)
            c = _transport(pid("c"), maddrs)
            await c.start()
            await a.publish(R + 1, b"a" * 1000, expires_in=60)
            got = await _first_delivery(c, [R + 1], 20)  # the same wait for both arms
            return got, a.info()["bootstrap_reintroduced"] + b.info()["bootstrap_reintroduced"]
        finally:
            for t in (a, b, c):
                if t is not None:
                    await t.close()
            await boot.shutdown()

    got, reintroduced = asyncio.run(go())
    if watch:
        assert [(d.publisher, d.data) for d in got] == [(pid("a"), b"a" * 1000)]
        assert reintroduced >= 2
    else:
        assert got == [] and reintroduced == 0
