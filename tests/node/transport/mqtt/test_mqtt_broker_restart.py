"""The broker goes away and comes back: both nodes reconnect by themselves, what one published
meanwhile waits in its bounded queue and arrives, in order, after the restart; what did not fit
is counted, never silently lost."""

from __future__ import annotations

import pytest

import asyncio

from tests.helpers.mqtt_fixtures import broker_for, certs, idents  # noqa: F401 - fixtures
from tests.helpers.mqtt_fixtures import collect, transport, until

pytestmark = pytest.mark.broker


def test_nodes_reconnect_after_a_broker_crash_and_deliver_what_waited(tmp_path, idents, certs):
    m = broker_for(tmp_path / "b", idents, certs).start()

    async def main():
        a = transport(m, idents[0], 0, max_queued=3)
        b = transport(m, idents[1], 1)
        await a.start(), await b.start()
        try:
            await a.publish(1, b"before", 60)
            assert [d.data for d in await collect(b, [1, 2, 3, 4, 5, 6], 1)] == [b"before"]

            m.stop(kill=True)  # a crash: no goodbye to the clients
            await until(lambda: _down(a, b), 15, "both links to notice the broker is gone")
            for r, body in ((2, b"r2"), (3, b"r3"), (4, b"r4"), (5, b"r5")):
                await a.publish(r, body, 60)  # returns at once: queued, not waited on
            await a.publish(6, b"expired", 0)  # its window is over before the broker is back
            await a.announce(b"hb-while-down", 60)
            assert a.info()["queued"] == 3 and a.counts["dropped"] == 2  # r2, then r3, made room

            m.start()
            got = await collect(b, [1, 2, 3, 4, 5, 6], 2, timeout=30)
            assert sorted(d.data for d in got) == [b"r4", b"r5"]
            assert a.counts["expired"] == 1 and a.counts["published"] == 3  # "before", r4, r5
            assert a.link.reconnects >= 1 and b.link.reconnects >= 1
            hb = await until(b.poll_announcements, 10, "the heartbeat re-sent after the restart")
            assert [d.data for d in hb] == [b"hb-while-down"]
            await a.publish(7, b"after", 60)
            assert [d.data for d in await collect(b, [7], 1)] == [b"after"]
            assert b.info()["connected"] and "broker_error" not in b.info()
        finally:
            await a.close(), await b.close()

    async def _down(*ts):
        return all(not t.link.connected.is_set() for t in ts)

    try:
        asyncio.run(main())
    finally:
        m.stop()
