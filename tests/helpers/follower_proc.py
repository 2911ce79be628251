"""A follower in its own process (for the kill test): fetches the newest version of ``--source``
over hivemind p2p streams into a chunk store, then writes what it got to ``--out`` and exits.
Run by tests/node/broadcast/test_follower_killed.py, which kills it mid-transfer and starts it again."""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import json
from pathlib import Path

from swarm_node.node.transport.hivemind.carrier import HivemindCarrier
from swarm_node.node.broadcast.peer import BroadcastPeer
from swarm_node.node.broadcast.store import ChunkStore
from swarm_node.protocol.identity import load_or_create_identity


async def main(a) -> None:
    got: dict = {}

    async def on_version(m, data):
        got.update(version=m.version, sha256=hashlib.sha256(data).hexdigest())

    carrier = await HivemindCarrier.create(a.swarm)
    peer = BroadcastPeer(load_or_create_identity(Path(a.identity)), carrier, swarm=a.swarm,
                         directory={a.source: a.source_addr}, follow=a.source, store=ChunkStore(Path(a.store)),
                         on_version=on_version)
    try:
        await peer.start()  # a restart resumes the pending version from the chunks on disk
        if not peer.held:
            while not await peer.ask_newest(a.source):
                await asyncio.sleep(0.2)
        while "version" not in got:
            await asyncio.sleep(0.05)
        t = next(t for t in peer.held.values() if t.manifest.version == got["version"])
        st = peer.status()
        Path(a.out).write_text(json.dumps({**got, "bytes_in": t.bytes_in, "resumed_chunks": st["resumed_chunks"]}))
    finally:
        await peer.close()
        await carrier.close()


if __name__ == "__main__":
    p = argparse.ArgumentParser()
    for name in ("swarm", "source", "source-addr", "identity", "store", "out"):
        p.add_argument(f"--{name}", required=True)
    asyncio.run(main(p.parse_args()))
