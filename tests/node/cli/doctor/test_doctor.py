"""``swarm-node doctor`` as a user runs it: against a real bootstrap peer on loopback (every check
answers, exit 0) and against nothing (the bootstrap line fails, exit 1, within seconds)."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import time

import pytest

from swarm_node.node.cli import main
from tests.helpers.paths import ROOT
from tests.helpers.procs import LOOPBACK_FLAGS, Procs, _env

pytestmark = [pytest.mark.subprocess]


def _doctor(*args: str, timeout: float = 120) -> tuple[subprocess.CompletedProcess, float]:
    t0 = time.monotonic()
    p = subprocess.run([sys.executable, "-m", "swarm_node.node.cli", "doctor", *args], capture_output=True, text=True,
                       cwd=ROOT, env=_env(), timeout=timeout)
    return p, time.monotonic() - t0


def test_doctor_against_an_unreachable_bootstrap_fails_its_line_and_exits_1_within_seconds(tmp_path):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))  # a port nothing listens on
        port = s.getsockname()[1]
        dead = f"/ip4/127.0.0.1/tcp/{port}/p2p/QmWyMywt33NGEr2d32nqvpPeQq36fd3tj9eZaiBj2CbKSM"
        p, took = _doctor("--bootstrap", dead, "--run.dir", str(tmp_path / "r"))
    lines = p.stdout.splitlines()
    assert p.returncode == 1, p.stdout + p.stderr
    assert any(line.startswith("fail  bootstrap") and dead in line and "refused" in line and "fix:" in line
               for line in lines), p.stdout
    assert any(line.startswith("warn  join       not tried") for line in lines)
    assert any(line.startswith("ok    disk") for line in lines) and lines[-1].startswith("something failed")
    # Seconds, not a join's retries: most of it is the interpreter and torch's import on a busy machine.
    assert took < 45, took
    assert "Traceback" not in p.stderr


@pytest.mark.daemon
def test_doctor_against_a_real_bootstrap_joins_and_reports_every_check_as_json(tmp_path):
    procs = Procs(tmp_path)
    try:
        _, maddr = procs.bootstrap()
        p, took = _doctor("--bootstrap", maddr, *LOOPBACK_FLAGS, "--run.dir", str(tmp_path / "r"),
                          "--window", "1", "--json")
    finally:
        procs.close()
    assert p.returncode == 0, p.stdout + p.stderr
    out = json.loads(p.stdout)
    checks = {c["name"]: c for c in out["checks"]}
    assert out["ok"] and out["exit"] == 0
    assert checks["bootstrap"]["status"] == "ok" and maddr in checks["bootstrap"]["found"]
    assert checks["join"]["status"] == "ok" and "over hivemind" in checks["join"]["found"]
    assert checks["addresses"]["status"] == "ok" and "loopback" in checks["addresses"]["found"]
    # The bootstrap dialed the doctor's port back at the address it saw it at (loopback: no NAT).
    assert checks["nat"]["status"] == "ok" and "saw this node at 127.0.0.1" in checks["nat"]["found"]
    assert checks["reachable"]["status"] == "ok" and "is reachable" in checks["reachable"]["found"]
    assert checks["clock"]["status"] == "warn" and out["clock_offset_s"] is None  # a swarm of no nodes yet
    assert {"config", "port", "reachable", "device", "profile", "disk"} <= set(checks)
    assert "Traceback" not in p.stderr


def test_doctor_is_a_listed_command_with_help(capsys):
    with pytest.raises(SystemExit):
        main(["--help"])
    assert "swarm-node doctor --bootstrap" in capsys.readouterr().out
    with pytest.raises(SystemExit):
        main(["doctor", "--help"])
    out = capsys.readouterr().out
    assert "clock" in out and "--window" in out and "--json" in out and "--swarm.initial_peers" in out
