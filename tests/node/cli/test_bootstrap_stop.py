"""``swarm-node bootstrap`` stopped as a terminal or a supervisor stops it: the signal reaches the
whole process group (its p2p daemon too), and the stop is clean: exit 0, no traceback. A second
bootstrap with the same key is refused while the first runs (it would share its peer id)."""

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


def test_a_second_bootstrap_with_the_same_key_is_refused_while_the_first_runs(tmp_path):
    maddr, key = tmp_path / "maddr", tmp_path / "key"
    log = tmp_path / "bootstrap.log"
    with log.open("wb") as out:
        first = subprocess.Popen([sys.executable, "-m", "swarm_node.node.cli", "bootstrap", "--host", "127.0.0.1", "--port",
                                  "0", "--no-nat", "--no-relay", "--identity", str(key), "--maddr-file", str(maddr)],
                                 stdout=out, stderr=subprocess.STDOUT, cwd=ROOT, start_new_session=True)
    try:
        wait_until(lambda: maddr.exists() and maddr.read_text().strip(), 120, "the bootstrap peer to listen", first)
        second = subprocess.run([sys.executable, "-m", "swarm_node.node.cli", "bootstrap", "--host", "127.0.0.1", "--port", "0",
                                 "--no-nat", "--no-relay", "--identity", str(key)], capture_output=True, text=True,
                                cwd=ROOT, timeout=120)
        assert second.returncode == 2, second.stderr[-2000:]
        assert f"the bootstrap key {key} is in use by process {first.pid}" in second.stderr
        assert "pass --identity with another file" in second.stderr
        assert not list(tmp_path.glob("*.lock"))  # the lock is in the home folder: a key's may be read-only
    finally:
        os.killpg(first.pid, signal.SIGTERM)
        first.wait(timeout=60)
    assert first.returncode == 0, log.read_text()[-3000:]
