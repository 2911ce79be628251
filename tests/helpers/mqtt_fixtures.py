"""Fixtures for the MQTT tests: a real Mosquitto per module (anonymous, password and TLS listeners
on loopback, an ACL that binds each account to its node's id, a self-signed CA made here), and
node identities whose peer ids are the broker's user names. Test modules import them by name (a
conftest.py here would shadow tests/conftest.py for the modules that import that one by name)."""

from __future__ import annotations

import pytest

from node.transport.mqtt.broker import Mosquitto, node_acl
from protocol.identity import Identity
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
