"""Fixtures for the NAT tests (tests/node/nat imports them): the namespaced net (tests/helpers/netns.py), torn down with every
process in it whatever the test did, and a ``Procs`` whose nodes start inside a namespace."""

from __future__ import annotations

import subprocess

import pytest

from tests.helpers.netns import NatNet, clean_leftovers, unavailable
from tests.helpers.paths import ROOT
from tests.helpers.procs import Procs


@pytest.fixture(autouse=True)
def _namespaces_available():
    why = unavailable()
    if why:
        pytest.skip(why)


@pytest.fixture
def nat_net():
    clean_leftovers()  # namespaces of an earlier run that was killed before its finalizer
    net = NatNet().build()
    try:
        yield net
    finally:
        net.close()
        assert net.alive() == [], f"namespaces left behind: {net.alive()}"


class NatProcs(Procs):
    """``Procs`` (tests/helpers/procs.py) whose nodes run in the namespace ``at`` names."""

    def __init__(self, root, net: NatNet):
        super().__init__(root)
        self.net, self.where = net, "pub"

    def at(self, role: str) -> "NatProcs":
        self.where = role
        return self

    def _spawn(self, args: list[str], log) -> subprocess.Popen:
        p = self.net.python(self.where, ["-m", "swarm_node.node.cli", *args], log, ROOT)
        self.procs.append(p)
        return p


@pytest.fixture
def nat_procs(nat_net, tmp_path):
    p = NatProcs(tmp_path, nat_net)
    yield p
    p.close()
