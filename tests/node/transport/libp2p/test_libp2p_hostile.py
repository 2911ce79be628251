"""The py-libp2p transport against what free keys buy: a flood of fresh identities, copies of one
message checked once, the connected-peer table read on its own thread, and how often a large
body is served to strangers. Real hosts on loopback, in this folder's own pytest process."""

from __future__ import annotations

import asyncio
import collections
import time

import msgpack
import pytest

from swarm_node.node.clock import RoundClock
from swarm_node.node.swarm.exchange import SwarmExchange
from swarm_node.node.transport.base import Delivery, TransportError
from swarm_node.node.transport.libp2p.transport import GOSSIP_BODY_MAX, Libp2pTransport, gossip_topics
from swarm_node.node.transport.libp2p.host import Libp2pHost, libp2p_peer_id, publisher_of
from swarm_node.node.transport.libp2p.trio_bridge import BridgeClosed, TrioThread
from swarm_node.protocol.codec import encode
from swarm_node.protocol.identity import Identity
from swarm_node.protocol.messages import Announcement, RolloutBatch, RolloutRecord
from swarm_node.protocol.signing import envelope_to_bytes, sign


from tests.helpers.libp2p_net import LOOPBACK, VOCAB, envelope, exchange, hub_and_two, transport, until  # noqa: F401

def forged(kp, topic: str, data: bytes):
    """A gossip message whose origin is ``kp``, signed by it: what a raw host makes for each of
    the fresh identities it floods with (keys are free)."""
    import os

    from libp2p.peer.id import ID
    from libp2p.pubsub.pb import rpc_pb2
    from libp2p.pubsub.pubsub import PUBSUB_SIGNING_PREFIX

    msg = rpc_pb2.Message(data=data, topicIDs=[topic], from_id=ID.from_pubkey(kp.public_key).to_bytes(),
                          seqno=os.urandom(8))
    msg.signature = kp.private_key.sign(PUBSUB_SIGNING_PREFIX.encode() + msg.SerializeToString())
    msg.key = kp.public_key.serialize()
    return msg



def test_a_flood_of_fresh_identities_buys_a_bounded_number_of_checks_and_honest_gossip_still_arrives():
    """X, one raw host next to B, gossips 300 well-formed, correctly signed envelopes of 300
    fresh identities (each would pass admission), 100 junk messages under 100 more fresh
    identities and 200 heartbeats of the first 300, as fast as B's
    gossipsub takes them. B checks strangers' messages within its budget (20 a second, burst 40)
    and drops the rest unchecked and unforwarded; A, whose rollouts B has admitted in 3 rounds
    before, is checked whatever the flood, and every one of A's envelopes reaches C through B."""
    from swarm_node.node.transport.libp2p.budget import CheckBudget
    from swarm_node.node.transport.libp2p.host import libp2p_key_pair

    ia, ib, ic, ix = (Identity.generate() for _ in range(4))
    sybils = [Identity.generate() for _ in range(300)]
    ahead = [0.0]  # the swarm's clock, stepped a round at a time while A earns its standing
    clock = RoundClock(10.0, now=lambda: time.time() + ahead[0])
    topic, peers_topic = gossip_topics("t")

    async def main():
        (b, eb), (a, ea), (c, ec) = await hub_and_two(ib, ia, ic, clock)
        checked = collections.Counter()
        gate = b._gate

        def counting(d):
            checked["A" if d.publisher == ia.peer_id else "stranger"] += 1
            return gate(d)

        b.set_gate(counting)  # before any stranger's message: A's first envelope comes after the mesh
        x = Libp2pHost(ix, LOOPBACK, b.host.addrs, target_peers=1)
        await x.start(20)
        try:
            await x.bridge.call(x.connect_bootstrap)
            await x.subscribe(topic, lambda *a: None, lambda *a: True)
            await x.subscribe(peers_topic, lambda *a: None, lambda *a: True)
            await until(lambda: b.host.mesh_peers(topic) >= 3 and x.mesh_peers(topic) >= 1 and
                        c.host.mesh_peers(topic) >= 1, 20, "A, C and X in B's mesh")
            for k in range(3):  # admitted in 3 of B's rounds: a history (standing.py)
                rr = clock.current()
                await a.publish(rr, envelope(ia, rr, seq=1 + k), 60)
                await until(lambda: ec.stats.groups_in[ia.peer_id] == 1 + k and
                            eb.stats.groups_in[ia.peer_id] == 1 + k, 20, "A's envelope admitted at B and C")
                ahead[0] += clock.round_seconds
            await until(lambda: b.inbox.is_vouched(ia.peer_id), 20, "A vouched at B as its next round began")
            r = clock.current()
            flood = [forged(libp2p_key_pair(s), topic, msgpack.packb([r, envelope(s, r)])) for s in sybils]
            # And junk under fresh identities of their own: malformed, or signed by another key.
            junk = [forged(libp2p_key_pair(Identity.generate()), topic,
                           b"\xc1 junk" if k % 2 else msgpack.packb([r, envelope(sybils[k], r)]))
                    for k in range(100)]
            beats = [forged(libp2p_key_pair(s), peers_topic, envelope_to_bytes(sign(encode(Announcement(
                sender=s.peer_id, round=r, policy_version=1, model_fingerprint="m", tokenizer_fingerprint="tok",
                created_at=time.time(), addrs=())), s, 2))) for s in sybils[:200]]
            t0 = time.monotonic()

            async def push_all():
                # Junk among the envelopes (B's gossipsub takes 100 a second from one peer: junk
                # sent after the flood would all be dropped there, never reaching B's checks).
                mixed = [m for k, e in enumerate(flood) for m in ([e, junk[k // 3]] if k % 3 == 0 else [e])]
                for m in mixed + beats:
                    await x.pubsub.push_msg(x.host.get_id(), m)

            pushing = asyncio.ensure_future(x.bridge.call(push_all))
            await asyncio.sleep(0.2)
            await a.publish(r, envelope(ia, r, seq=4), 60)  # A keeps publishing through the flood
            await until(lambda: ec.stats.groups_in[ia.peer_id] >= 4, 30, "A's envelopes at C through the flood")
            await pushing
            await until(lambda: b.counts["strangers_over_budget"] > 0, 20, "B's budget spent")
            elapsed = time.monotonic() - t0
            budget = CheckBudget()
            bound = budget.strangers_burst + budget.strangers_per_s * (elapsed + 5) + 1
            # Every check B paid for a stranger came out of the budget; A's were all checked.
            assert checked["A"] >= 4
            assert checked["stranger"] <= bound, (checked, elapsed)
            # C got every one of A's envelopes, and of the strangers' only what B checked and passed.
            assert ec.stats.groups_in[ia.peer_id] == 4
            assert ec.stats.envelopes_in - 4 <= checked["stranger"], (ec.stats.envelopes_in, checked)
            # Nothing bad went past B: C refused nothing because it was handed nothing to refuse.
            assert not ec.stats.rejected and not c.rejected, (ec.stats.rejected, c.rejected)
            assert b.rejected["malformed_envelope"] + eb.stats.rejected["sender_mismatch"] > 0, (b.rejected, eb.stats.rejected)
            print(f"flood: {len(flood)} envelopes + {len(junk)} junk + {len(beats)} heartbeats of fresh ids in {elapsed:.1f} s; "
                  f"B checked {checked['stranger']} of strangers' and {checked['A']} of A's; "
                  f"C admitted {ec.stats.envelopes_in} (A's 4); B counts {dict(b.counts)}")
        finally:
            await x.close()
            await ea.close(), await ec.close(), await eb.close()

    asyncio.run(main())


def test_fresh_keys_sending_only_unknown_task_families_are_never_pooled_and_honest_gossip_arrives():
    """X, one raw host next to B, gossips well-formed, correctly signed batches of 120 fresh
    identities a round for two rounds, every group of a task family nobody here has (another
    dataset, or another version of one). B checks them within its strangers' budget, pools none
    (``unusable_batches``, no rejection) and passes on what it checked (other nodes may hold the
    family): C, behind B, is handed no more than B checked, and pools none either. A gets every
    envelope of the flood's rounds to C, as in the clean rounds before."""
    from swarm_node.node.transport.libp2p.host import libp2p_key_pair

    ia, ib, ic, ix = (Identity.generate() for _ in range(4))
    ahead = [0.0]
    clock = RoundClock(10.0, now=lambda: time.time() + ahead[0])
    topic = gossip_topics("t")[0]

    async def main():
        (b, eb), (a, ea), (c, ec) = await hub_and_two(ib, ia, ic, clock)
        passed_on = collections.Counter()  # strangers' messages B's gate passed (what it may forward)
        gate = b._gate

        def counting(d):
            ok = gate(d)
            passed_on["stranger"] += ok and d.publisher != ia.peer_id
            return ok

        b.set_gate(counting)
        x = Libp2pHost(ix, LOOPBACK, b.host.addrs, target_peers=1)
        await x.start(20)
        try:
            await x.bridge.call(x.connect_bootstrap)
            await x.subscribe(topic, lambda *a: None, lambda *a: True)
            await until(lambda: b.host.mesh_peers(topic) >= 3 and x.mesh_peers(topic) >= 1 and
                        c.host.mesh_peers(topic) >= 1, 20, "A, C and X in B's mesh")
            delivered = {}
            for phase, rounds in (("clean", 3), ("flood", 2)):
                got0 = ec.stats.groups_in[ia.peer_id]
                for k in range(rounds):
                    r = clock.current()
                    if phase == "flood":
                        msgs = [forged(libp2p_key_pair(s), topic, msgpack.packb(
                            [r, envelope(s, r, task_id=f"otherdata_{r:08x}:{k}:1")]))
                            for s in (Identity.generate() for _ in range(120))]

                        async def push(msgs=msgs):
                            for m in msgs:
                                await x.pubsub.push_msg(x.host.get_id(), m)

                        pushing = asyncio.ensure_future(x.bridge.call(push))
                        await asyncio.sleep(0.1)
                    await a.publish(r, envelope(ia, r, seq=10 * len(delivered) + k + 1), 60)
                    await until(lambda: eb.stats.groups_in[ia.peer_id] >= got0 + k + 1, 20, "A's envelope at B")
                    if phase == "flood":
                        await pushing
                        await until(lambda: eb.stats.unusable_batches >= 1, 20, "B's checks of the flood")
                    ahead[0] += clock.round_seconds
                # A's envelopes reach C through B: wait for the ones of this phase
                await until(lambda: ec.stats.groups_in[ia.peer_id] >= got0 + rounds, 20, f"A's {phase} envelopes at C")
                delivered[phase] = (ec.stats.groups_in[ia.peer_id] - got0) / rounds
            # A marker after the flood: anything B forwarded would have reached C before it.
            r = clock.current()
            await a.publish(r, envelope(ia, r, seq=99), 60)
            await until(lambda: ec.stats.groups_in[ia.peer_id] == 6, 20, "the marker at C")
            assert delivered["flood"] >= 0.9 * delivered["clean"] and delivered["clean"] == 1.0, delivered
            assert eb.stats.unusable_batches >= 1 and eb.stats.dropped_unknown_family >= 1
            assert not eb.stats.rejected and not b.rejected, (eb.stats.rejected, b.rejected)
            assert b.counts["strangers_over_budget"] > 0  # most of the flood was never checked
            # C was handed at most what B checked and passed on; neither pooled any of it.
            await until(lambda: ec.stats.unusable_batches >= 1, 20, "the flood's batches B passed on, at C")
            assert ec.stats.unusable_batches <= passed_on["stranger"]
            assert set(eb.stats.groups_in) | set(ec.stats.groups_in) <= {ia.peer_id}
            assert ec.stats.envelopes_in == 6 and not ec.stats.rejected
            print(f"unknown-family flood: B checked {passed_on['stranger']} of 240 "
                  f"(over the strangers' budget, unchecked and not passed on: {b.counts['strangers_over_budget']}); "
                  f"C was handed {ec.stats.unusable_batches}; A's delivery clean {delivered['clean']:.2f} "
                  f"flood {delivered['flood']:.2f}")
        finally:
            await x.close()
            await ea.close(), await ec.close(), await eb.close()

    asyncio.run(main())


def test_copies_arriving_while_the_first_is_checked_are_checked_once_and_delivered_once():
    """A diamond: A's gossip reaches D through B and through C. D's check is slow (0.5 s), so the
    second copy arrives while the first is being checked, before pubsub marks it seen: it is dropped
    (one check, one budget charge) and not delivered again (no replay counted against an honest
    peer); the first copy's verdict stands."""
    ia, ib, ic, idd = (Identity.generate() for _ in range(4))
    clock = RoundClock(10.0)
    r = clock.current()
    topic = gossip_topics("t")[0]

    async def main():
        (a, ea), (b, eb), (c, ec) = await hub_and_two(ia, ib, ic, clock)
        d = transport(idd, b.host.addrs + c.host.addrs, target_peers=2)
        ed = exchange(d, idd, clock)
        await ed.start()
        await d.host.bridge.call(d.host.connect_bootstrap)  # both, not just the first that answers
        checks = collections.Counter()
        gate = d._gate

        def slow(dl):
            checks[dl.publisher] += 1
            time.sleep(0.5)
            return gate(dl)

        d.set_gate(slow)
        try:
            await until(lambda: d.host.mesh_peers(topic) >= 2 and b.host.mesh_peers(topic) >= 2 and
                        c.host.mesh_peers(topic) >= 2 and a.host.mesh_peers(topic) >= 2, 30, "the diamond's mesh")
            for k in range(3):
                await a.publish(r - k, envelope(ia, r - k, seq=1 + k), 60)
            await until(lambda: ed.stats.envelopes_in == 3, 20, "A's envelopes at D")
            await until(lambda: eb.stats.envelopes_in == 3 and ec.stats.envelopes_in == 3, 20, "at B and C")
            await asyncio.sleep(1.0)  # any second delivery would be on its way by now
            assert checks[ia.peer_id] == 3, checks
            assert ed.stats.envelopes_in == 3 and not ed.stats.rejected and not d.rejected, (ed.stats.rejected, d.rejected)
            assert d.counts.get("republished", 0) == 0
        finally:
            await ea.close(), await eb.close(), await ec.close(), await ed.close()

    asyncio.run(main())


def test_a_pointer_fetch_reads_the_connected_peers_on_the_trio_thread():
    """The connected-peer table belongs to the trio thread, which changes it while it runs; the
    fetch used to read it from the asyncio loop."""
    import hashlib
    import threading

    from libp2p.peer.id import ID

    ia, ib = Identity.generate(), Identity.generate()
    body = b"x" * 100
    readers, asked = [], []

    class Host:
        is_connected = getattr(Libp2pHost, "is_connected", None)  # (the old code had none: it read connected())

        def __init__(self, bridge):
            self.bridge = bridge

        def connected(self):
            readers.append(threading.current_thread())
            return [ID.from_base58(libp2p_peer_id(ia))]

    class Bodies:
        async def call(self, addr, request, max_reply, timeout):
            asked.append(addr)
            return 0, body

    async def main():
        bridge = TrioThread("test")
        await bridge.start()
        try:
            t = transport(ib)
            t.host, t._bodies = Host(bridge), Bodies()
            addr = f"/ip4/10.9.9.9/tcp/4001/p2p/{libp2p_peer_id(ia)}"
            await t._fetch(ia.peer_id, 5, len(body), hashlib.sha256(body).digest(), addr)
            assert t.counts["fetched"] == 1 and t.inbox.take([5])[0].data == body
        finally:
            await bridge.stop()

    asyncio.run(main())
    assert readers and all(r is not threading.current_thread() for r in readers), readers
    assert asked == [f"/p2p/{libp2p_peer_id(ia)}"]  # connected: by peer id, not the claimed address


def test_a_large_body_is_served_a_bounded_number_of_times_to_fresh_ids_and_still_to_known_peers():
    """Large bodies were served at most twice per (peer id, round), but ids are free: 200 fresh
    ids were served 400 times. Peers without an admitted history now share 16 serves a body
    (node/transport/libp2p/serving.py), a peer gets 2."""
    ime, friend = Identity.generate(), Identity.generate()
    t = transport(ime)
    t._mine[7] = b"b" * 2_000_000
    ask = msgpack.packb([7])

    async def main():
        served = 0
        for _ in range(200):
            fresh = libp2p_peer_id(Identity.generate())
            for _ in range(2):
                reply = await t._serve_body(fresh, ask)
                if reply[0] == 0:
                    served += 1
                    reply[2](len(reply[1]))  # written in full: the carrier settles the serve
        assert served == 16, served
        for r in (1, 2, 3, 4):  # admitted in 3 of the receiver's rounds: vouched as the 4th begins
            t.inbox.set_window([r], None)
            t.admitted(friend.peer_id, r)
        replies = [(await t._serve_body(libp2p_peer_id(friend), ask))[0] for _ in range(3)]
        assert replies == [0, 0, 1]  # a known peer is served its share, and no more
        assert t.counts["serves_refused"] == 400 - 16 + 1

    asyncio.run(main())
