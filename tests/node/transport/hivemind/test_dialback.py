"""Dial-back over real p2pd daemons (node/transport/hivemind/dialback.py): a bootstrap peer dials
the asker's port at the address it saw the asker at, and says what answered there: a libp2p peer
(reachable), nothing (refused), or another service."""

from __future__ import annotations

import asyncio

import pytest

from swarm_node.node.transport.hivemind.daemon import stop_dht_node
from swarm_node.node.transport.addresses import observed_host
from swarm_node.node.transport.hivemind.dialback import DialGate, ask_dialback, serve_dialback
from tests.helpers.hivemind_dht import _bootstrap, _transport, pid

pytestmark = [pytest.mark.daemon]


def _port(maddrs: list[str]) -> int:
    return int(next(m for m in maddrs if "/tcp/" in m).split("/tcp/")[1].split("/")[0])


def test_the_server_dials_only_the_address_the_connection_came_from():
    assert observed_host("/ip4/203.0.113.9/tcp/40211") == "203.0.113.9"
    assert observed_host("/ip6/2001:db8::1/tcp/4001") == "2001:db8::1"
    assert observed_host("/ip4/198.51.100.1/tcp/4001/p2p/QmRelay/p2p-circuit") is None  # relayed: nothing to dial
    assert observed_host("/dns4/example.org/tcp/4001") is None


def test_a_bootstrap_dials_the_askers_port_back_and_says_what_answered():
    async def go():
        boot, maddrs = await _bootstrap()
        await serve_dialback(boot.p2p, DialGate(per_ip_s=0))  # three asks from one address in a row
        asker = _transport(pid("asker"), maddrs)
        async def ssh(reader, writer):  # another service on the port: it answers, but not as libp2p does
            writer.write(b"SSH-2.0-OpenSSH_9.6 Debian\r\n")
            await writer.drain()
            writer.close()

        other = await asyncio.start_server(ssh, "127.0.0.1", 0)
        closed = await asyncio.start_server(lambda r, w: w.close(), "127.0.0.1", 0)
        closed_port = closed.sockets[0].getsockname()[1]
        closed.close()
        await closed.wait_closed()
        try:
            await asker.start()
            p2p, boot_id = asker._node.p2p, boot.peer_id.to_base58()
            own = await ask_dialback(p2p, boot_id, _port(asker.maddrs), timeout=5)
            shut = await ask_dialback(p2p, boot_id, closed_port, timeout=5)
            wrong = await ask_dialback(p2p, boot_id, other.sockets[0].getsockname()[1], timeout=5)
        finally:
            other.close()
            await asker.close()
            await stop_dht_node(boot, timeout=5)
        return own, shut, wrong, asker.maddrs

    own, shut, wrong, maddrs = asyncio.run(go())
    assert own.reachable and own.observed.startswith("/ip4/127.0.0.1/tcp/"), own
    assert own.dialed == f"127.0.0.1:{_port(maddrs)}" and own.why == ""
    assert not shut.reachable and "refused" in shut.why and shut.observed.startswith("/ip4/127.0.0.1/")
    assert not wrong.reachable and "not a libp2p peer" in wrong.why, wrong


def test_any_joined_node_answers_as_a_bootstrap_does():
    async def go():
        boot, maddrs = await _bootstrap()
        named, asker = _transport(pid("named"), maddrs), _transport(pid("asker3"), maddrs)
        try:
            await named.start()  # a training node's transport, named as a bootstrap by a newcomer
            await asker.start()
            return await ask_dialback(asker.p2p, named.p2p_peer_id, _port(asker.maddrs), timeout=5)
        finally:
            await asker.close()
            await named.close()
            await stop_dht_node(boot, timeout=5)

    r = asyncio.run(go())
    assert r.reachable and r.observed.startswith("/ip4/127.0.0.1/"), r


def test_a_peer_that_serves_no_dial_back_is_said_to_give_no_answer():
    async def go():
        boot, maddrs = await _bootstrap()  # no serve_dialback: as an older bootstrap
        asker = _transport(pid("asker2"), maddrs)
        try:
            await asker.start()
            return await ask_dialback(asker._node.p2p, boot.peer_id.to_base58(), 4001, timeout=5)
        finally:
            await asker.close()
            await stop_dht_node(boot, timeout=5)

    r = asyncio.run(go())
    assert not r.reachable and "could not ask" in r.why and "older" in r.why
