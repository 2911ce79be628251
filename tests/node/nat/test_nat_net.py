"""The namespaced net the NAT tests run in is what it claims (tests/helpers/netns.py): homes reach
the public address masqueraded as their router, nothing reaches into a home, the homes cannot
reach each other, and closing it leaves no namespace and no process behind."""

from __future__ import annotations

import pytest

from tests.helpers.netns import HOME_IP, PUBLIC_IP, ROUTER_WAN, NatNet, clean_leftovers
from tests.helpers.nat_fixtures import _namespaces_available, nat_net  # noqa: F401 - fixtures

pytestmark = [pytest.mark.netns, pytest.mark.subprocess]


def test_homes_reach_out_masqueraded_and_nothing_reaches_in(nat_net):
    assert nat_net.connects("h1", "pub", PUBLIC_IP) == ROUTER_WAN[1]  # seen as its router's WAN
    assert nat_net.connects("h2", "pub", PUBLIC_IP) == ROUTER_WAN[2]
    assert nat_net.connects("pub", "h1", HOME_IP[1]) is None  # no route into a home
    assert nat_net.connects("h2", "h1", ROUTER_WAN[1]) is None  # nor through its router, unasked
    assert nat_net.connects("h1", "h2", HOME_IP[2]) is None


def test_close_kills_what_runs_inside_and_removes_every_namespace():
    net = NatNet("close").build()
    try:
        # A process the test did not start itself (as p2pd is a node's child) is killed too.
        net.exec("h1", "sh", "-c", "sleep 600 >/dev/null 2>&1 &")
        assert net.pids()
    finally:
        net.close()
    assert net.alive() == [] and net.pids() == []


def test_a_killed_runs_namespaces_are_removed_by_the_next():
    """A namespace named for a process that no longer runs (a test run killed mid-test) goes."""
    import subprocess

    gone = subprocess.Popen(["true"])
    gone.wait()
    stale = f"snnat-{gone.pid}-0-pub"
    subprocess.run(["ip", "netns", "add", stale], check=True)
    assert stale in clean_leftovers()
    assert stale not in subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
