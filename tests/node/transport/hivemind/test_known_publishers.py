"""Who a hivemind reader fetches first follows the one vouching rule every carrier follows
(node/transport/standing.py): its ``known`` publishers were admitted in 3 of its own rounds."""

from __future__ import annotations

import asyncio
import collections

from swarm_node.node.transport.hivemind.transport import HivemindTransport
from swarm_node.node.transport.inbox import Inbox
from swarm_node.protocol.identity import Identity


class EmptyNode:
    async def get_many(self, keys, sufficient_expiration_time=None):
        return {}


def _reader() -> HivemindTransport:
    me = Identity.generate()
    t = HivemindTransport(swarm="t", publisher=me.peer_id, signer=me)
    t._node = EmptyNode()
    return t


def test_one_admitted_envelope_does_not_make_a_publisher_known():
    """The fetcher made a publisher known (fetched first, before any unknown key) at its first
    admitted envelope: a fresh key bought a known peer's slot with one envelope."""
    t = _reader()
    asyncio.run(t.poll(range(6, 11)))  # the node's round is 10
    for label in (9, 10, 11):  # three labels signed in one round
        t.admitted("fresh", label)
    asyncio.run(t.poll(range(7, 12)))
    assert "fresh" not in t._fetcher.known


def test_the_hivemind_reader_and_a_push_carrier_vouch_alike():
    """The same admissions, in the same rounds of the receiver's, give the same standing."""
    t = _reader()
    inbox = Inbox(1 << 20, collections.Counter(), collections.Counter())
    # (receiver's round, labels admitted in it): a key that publishes ahead, one that lapses.
    script = {10: [("a", 10), ("b", 11), ("b", 10)], 11: [("a", 11), ("b", 12)], 12: [("a", 11)],
              13: [("b", 13), ("a", 13)], 14: [("b", 14)], 15: [("c", 15)]}
    seen = []
    for now, admitted in script.items():
        rounds = list(range(now - 4, now + 1))
        asyncio.run(t.poll(rounds))
        inbox.set_window(rounds, None)
        for publisher, label in admitted:
            t.admitted(publisher, label)
            inbox.vouch(publisher, label)
        hivemind = sorted(t._fetcher.known)
        assert hivemind == sorted(inbox.vouched.vouched), now
        seen.append(hivemind)
    assert seen[-1] == ["a", "b"] and seen[2] == [] and seen[3] == ["a"]  # a: rounds 10-12, vouched as 13 began
