"""Fixtures for the MQTT tests: a real Mosquitto per module (anonymous, password and TLS listeners
on loopback, an ACL that binds each account to its node's id, a self-signed CA made here), and
node identities whose peer ids are the broker's user names; and a transport logged in to it, with
ways to wait for what it delivers. Test modules import them by name."""

from __future__ import annotations

import asyncio
import time

import pytest

from swarm_node.node.transport.mqtt.broker import Mosquitto, node_acl
from swarm_node.node.transport.mqtt.transport import MqttTransport
from swarm_node.node.transport.mqtt.url import parse_broker_url
from swarm_node.protocol.identity import Identity
from tests.helpers.tls_certs import make_certs

PART_LIMIT = 64 * 1024  # the broker's max_packet_size: envelopes above it travel split


@pytest.fixture(scope="module")
def certs(tmp_path_factory):
    return make_certs(tmp_path_factory.mktemp("certs"))


@pytest.fixture(scope="module")
def idents():
    return [Identity.generate() for _ in range(4)]


def broker_for(folder, idents, certs, **kw) -> Mosquitto:
    return Mosquitto(folder, users={i.peer_id: f"pw-{n}" for n, i in enumerate(idents)}, acl=node_acl(),
                     tls=(str(certs.ca), str(certs.server_cert), str(certs.server_key)),
                     max_packet_size=PART_LIMIT, **kw)


@pytest.fixture(scope="module")
def broker(tmp_path_factory, idents, certs):
    m = broker_for(tmp_path_factory.mktemp("broker"), idents, certs).start()
    yield m
    m.stop()


def transport(broker, ident, n, kind="password", password=None, swarm="s", **kw) -> MqttTransport:
    user = ident.peer_id if kind != "anonymous" else None
    extra = {k: kw.pop(k) for k in ("ca_file", "cert_file", "key_file") if k in kw}
    settings = parse_broker_url(broker.url(kind, user), password=f"pw-{n}" if password is None else password, **extra)
    return MqttTransport(swarm=swarm, publisher=ident.peer_id, broker=settings, join_retries=0,
                         connect_timeout=5.0, **kw)


async def until(cond, timeout=10.0, what="condition"):
    deadline = time.monotonic() + timeout
    while True:
        got = await cond()
        if got:
            return got
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.05)


async def collect(t, rounds, n, timeout=10.0):
    got = []

    async def enough():
        got.extend(await t.poll(rounds))
        return len(got) >= n

    await until(enough, timeout, f"{n} deliveries")
    return got
