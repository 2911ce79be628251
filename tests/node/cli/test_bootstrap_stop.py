"""``swarm-node bootstrap`` stopped as a terminal or a supervisor stops it: the signal reaches the
whole process group (its p2p daemon too), and the stop is clean: exit 0, no traceback."""

from __future__ import annotations

import os
import signal
import subprocess
import sys

import pytest

from tests.helpers.paths import ROOT
from tests.helpers.wait import wait_until

pytestmark = [pytest.mark.daemon, pytest.mark.subprocess]


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=["ctrl-c", "sigterm"])
def test_a_bootstrap_stopped_with_its_daemon_prints_no_traceback(sig, tmp_path):
    maddr = tmp_path / "maddr"
    log = tmp_path / "bootstrap.log"
    with log.open("wb") as out:
        p = subprocess.Popen([sys.executable, "-m", "swarm_node.node.cli", "bootstrap", "--host", "127.0.0.1", "--port", "0",
                              "--no-nat", "--no-relay", "--identity", str(tmp_path / "key"),
                              "--maddr-file", str(maddr)], stdout=out, stderr=subprocess.STDOUT, cwd=ROOT,
                             env=dict(os.environ, PYTHONUNBUFFERED="1"), start_new_session=True)
    try:
        wait_until(lambda: maddr.exists() and maddr.read_text().strip(), 120, "the bootstrap peer to listen", p)
        os.killpg(p.pid, sig)  # the group, as a terminal's Ctrl-C or `timeout` does: p2pd gets it too
        rc = p.wait(timeout=60)
    finally:
        if p.poll() is None:
            os.killpg(p.pid, signal.SIGKILL)
            p.wait()
    text = log.read_text()
    assert rc == 0, text[-3000:]
    assert "bootstrap peer stopped" in text
    assert "Traceback" not in text and "never retrieved" not in text, text[-3000:]
