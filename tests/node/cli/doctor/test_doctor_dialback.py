"""The doctor's dial-back request (node/cli/doctor/command.py's ``_dialback``), its peers replaced: every
peer is asked at once, so one that never answers costs its own answer, not the others'."""

from __future__ import annotations

import asyncio

from swarm_node.node.cli.doctor import command as doctor
from swarm_node.node.transport.hivemind import dialback
from swarm_node.node.transport.carriers import carrier
from swarm_node.node.transport.hivemind.dialback import Reach


class Transport:
    maddrs = ["/ip4/127.0.0.1/tcp/31338/p2p/QmSelf"]
    p2p = object()


def test_a_peer_that_never_answers_cancels_none_of_the_others(monkeypatch):
    monkeypatch.setattr(doctor, "ASK_S", 0.5, raising=False)  # each peer then gets 0.4 s
    asked = []

    async def ask_dialback(p2p, peer, port, timeout):
        asked.append(peer)
        if peer == "QmFlooded":
            await asyncio.Event().wait()  # a flooded bootstrap: the stream opens, no reply comes
        return Reach(peer, port, "/ip4/127.0.0.1/tcp/50000", f"127.0.0.1:{port}", True, "")

    monkeypatch.setattr(dialback, "ask_dialback", ask_dialback)

    async def go():
        asker = doctor._dialback(carrier("hivemind"), ["QmFlooded", "QmA", "QmB", "QmFourth"], 3.0)
        return await asyncio.wait_for(asker(Transport()), 5)

    got = asyncio.run(go())
    assert asked == ["QmFlooded", "QmA", "QmB"]  # three at most
    assert [r.peer for r in got] == ["QmFlooded", "QmA", "QmB"]
    assert not got[0].reachable and got[0].why.startswith("no answer in 0.4 s") and not got[0].observed
    assert got[1].reachable and got[2].reachable and got[1].port == 31338
