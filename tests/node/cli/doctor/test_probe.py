"""The doctor's bounded network steps (node/cli/doctor/probe.py): where an address dials, and a
dial that answers or not within its time."""

from __future__ import annotations

import asyncio
import socket
import time

from swarm_node.node.cli.doctor.probe import dial, endpoint_of


def test_where_addresses_dial():
    assert endpoint_of("/ip4/1.2.3.4/tcp/31337/p2p/QmWyMy") == ("1.2.3.4", 31337)
    assert endpoint_of("/dns4/boot.example/tcp/4001") == ("boot.example", 4001)
    assert endpoint_of("mqtts://node1@broker.example:8884") == ("broker.example", 8884)
    assert endpoint_of("mqtts://node1@broker.example") == ("broker.example", 8883)
    assert endpoint_of("mqtt://broker.example") == ("broker.example", 1883)
    assert endpoint_of("/p2p/QmWyMy") is None and endpoint_of("/ip4/1.2.3.4/udp/9/quic") is None


def test_a_dial_says_who_answered_and_why_not():
    with socket.socket() as listening, socket.socket() as closed:
        listening.bind(("127.0.0.1", 0))
        listening.listen()
        closed.bind(("127.0.0.1", 0))  # bound, not listening: refused
        ok, why, secs = asyncio.run(dial("127.0.0.1", listening.getsockname()[1], 2.0))
        assert ok and why == "" and secs < 2.0
        t0 = time.monotonic()
        ok, why, _ = asyncio.run(dial("127.0.0.1", closed.getsockname()[1], 2.0))
        assert not ok and "refused" in why and time.monotonic() - t0 < 2.0
