"""Behind NAT over py-libp2p: swarm-node's host has no circuit relay and no hole punching, so two
nodes in two homes, each behind its own masquerading router, cannot reach each other through a
public bootstrap peer; each says what to open, and ``--swarm.behind_nat`` is refused with the same
advice (slow; needs root: tests/helpers/netns.py)."""

from __future__ import annotations

import pytest

from tests.helpers.netns import PUBLIC_IP
from tests.helpers.procs import status
from tests.helpers.wait import wait_until
from tests.helpers.nat_fixtures import _namespaces_available, nat_net, nat_procs  # noqa: F401 - fixtures

pytestmark = [pytest.mark.slow, pytest.mark.netns, pytest.mark.subprocess]

HOME_FLAGS = ["--swarm.host_maddrs", '["/ip4/0.0.0.0/tcp/0"]']
WHAT_TO_OPEN = "forward a TCP port on the router"


def _bootstrap(nat_procs) -> str:
    out = nat_procs.root / "boot.maddr"
    p = nat_procs.at("pub")._spawn(["bootstrap", "--transport", "libp2p", "--host", PUBLIC_IP, "--port", "4001",
                                    "--identity", str(nat_procs.root / "boot.pem"), "--maddr-file", str(out)],
                                   nat_procs.root / "boot.log")
    wait_until(out.exists, 60, "the libp2p bootstrap peer", p)
    return out.read_text().split()[0]


def test_two_homes_cannot_reach_each_other_and_say_what_to_open(nat_procs, warm_tiny_model_dir, tmp_path):
    maddr = _bootstrap(nat_procs)
    common = ["--train.steps", "400", "--swarm.round_seconds", "2", *HOME_FLAGS]
    nodes = [nat_procs.at(f"h{i}").libp2p_node(f"n{i}", maddr, warm_tiny_model_dir, "--train.seed", str(i), *common)
             for i in (1, 2)]

    def said(i: int) -> bool:
        try:
            st = status(tmp_path / f"n{i}").get("swarm", {})
        except (OSError, ValueError):
            return False
        return WHAT_TO_OPEN in (tmp_path / f"n{i}.log").read_text() and st.get("undialable", 0) >= 1

    wait_until(lambda: said(1) and said(2), 120, "both nodes to say what to open", nodes[0])
    for i in (1, 2):
        st = status(tmp_path / f"n{i}")["swarm"]
        assert st["connected"] == 1 and st["groups_used_by_peer"] == {}, st  # the bootstrap only


def test_behind_nat_is_refused_with_what_to_open(nat_procs, warm_tiny_model_dir, tmp_path):
    maddr = _bootstrap(nat_procs)
    p = nat_procs.at("h1").libp2p_node("n1", maddr, warm_tiny_model_dir, "--swarm.behind_nat", "true", *HOME_FLAGS)
    assert p.wait(timeout=120) != 0
    log = (tmp_path / "n1.log").read_text()
    assert "the libp2p carrier has no relay" in log and WHAT_TO_OPEN in log and "Traceback" not in log, log[-2000:]
