"""A follower process killed (SIGKILL, with its p2p daemon) in the middle of a transfer over
hivemind streams resumes from its chunks on disk when started again: it fetches only what it
did not have, and the version it applies is the source's, byte for byte (slow: processes)."""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import random
import signal
import subprocess
import sys
import time

import pytest

from swarm_node.node.transport.ratelimit import TokenBucket
from swarm_node.node.transport.hivemind.carrier import HivemindCarrier
from swarm_node.node.broadcast.peer import BroadcastPeer
from tests.helpers.paths import ROOT
from swarm_node.protocol.identity import Identity

pytestmark = [pytest.mark.slow, pytest.mark.daemon, pytest.mark.subprocess]
SWARM = "kill"
SIZE, CHUNK = 8 * 1024 * 1024, 256 * 1024  # 32 chunks, at 2 MB/s about 4 s


def test_a_follower_killed_mid_transfer_resumes_from_its_chunks(tmp_path):
    data = random.Random(0).randbytes(SIZE)
    script = ROOT / "tests" / "helpers" / "follower_proc.py"

    async def go():
        src_id = Identity.generate()
        carrier = await HivemindCarrier.create(SWARM, upload=TokenBucket(2e6))
        src = BroadcastPeer(src_id, carrier, swarm=SWARM, directory={})
        await src.start()
        await src.publish(data, version=3, step=30, model_fingerprint="mf", tokenizer_fingerprint="tf",
                          format="safetensors-full", relays=[], chunk_size=CHUNK)
        args = [sys.executable, str(script), "--swarm", SWARM, "--source", src_id.peer_id,
                "--source-addr", carrier.address, "--identity", str(tmp_path / "f.pem"),
                "--store", str(tmp_path / "store"), "--out", str(tmp_path / "out.json")]
        chunks = tmp_path / "store" / "chunks"
        log = (tmp_path / "follower.log").open("ab")
        try:
            first = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
            deadline = time.monotonic() + 120
            while not (chunks.exists() and len([p for p in chunks.iterdir() if ".tmp" not in p.name]) >= 8):
                assert first.poll() is None and time.monotonic() < deadline, (tmp_path / "follower.log").read_text()
                await asyncio.sleep(0.05)
            os.killpg(first.pid, signal.SIGKILL)  # the python process and its p2pd, mid-transfer
            first.wait()
            kept = len([p for p in chunks.iterdir() if ".tmp" not in p.name])
            second = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
            rc = await asyncio.to_thread(second.wait, 120)
            return kept, rc, src.stats.served_chunks
        finally:
            log.close()
            await src.close()

    kept, rc, served = asyncio.run(go())
    assert rc == 0, (tmp_path / "follower.log").read_text()[-3000:]
    out = json.loads((tmp_path / "out.json").read_text())
    assert out["version"] == 3 and out["sha256"] == hashlib.sha256(data).hexdigest()
    assert 8 <= kept < 32 and out["resumed_chunks"] == kept  # every chunk it had kept was used again
    assert out["bytes_in"] == SIZE - kept * CHUNK  # ... and only the rest was fetched
    assert served <= 32 + 4 + (32 - kept)  # the source sent the rest (plus the window cut by the kill)
