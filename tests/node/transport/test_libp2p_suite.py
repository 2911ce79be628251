"""Runs tests/node/transport/libp2p in a pytest process of its own: py-libp2p and hivemind cannot be imported in
one process (both register the protobuf symbol ``crypto.pb.KeyType``), and the rest of the suite
imports hivemind. The inner run's report is printed; its failures fail this test."""

from __future__ import annotations

import pytest

import os
import subprocess
import sys
from tests.helpers.libp2p_process import IN_LIBP2P_PROCESS, LIBP2P_TESTS
from tests.helpers.paths import ROOT

pytestmark = pytest.mark.subprocess


def test_the_libp2p_tests_pass_in_their_own_process(request):
    args = [sys.executable, "-m", "pytest", str(LIBP2P_TESTS), "-q", "-rA", "-p", "no:cacheprovider"]
    markexpr = request.config.getoption("markexpr")
    if markexpr:
        args += ["-m", markexpr]
    env = {**os.environ, IN_LIBP2P_PROCESS: "1"}
    out = subprocess.run(args, cwd=ROOT, env=env, capture_output=True, text=True, timeout=1500)
    report = out.stdout[-20000:] + out.stderr[-5000:]
    print(report)
    # 5: the same marker expression selected none of them (they start no process of their own).
    assert out.returncode == 0 or (markexpr and out.returncode == 5), f"pytest tests/node/transport/libp2p exited {out.returncode}:\n{report}"
