"""What the soak samples every 10 s while the swarm runs: each process (the nodes, found by their
``--run.dir``; the bootstrap peer; the adversaries) read from /proc for resident memory, open
file descriptors and threads, with its p2p daemons' memory and descriptors; each node's run
folder's bytes by kind; and each node's status.json (step, honest groups admitted, weights lag).

One sample is one JSON line of ``samples.jsonl`` in the sim folder as well as a list in memory,
so a run cut short can still be judged. The /proc readers are common/proc.py's.
"""

from __future__ import annotations

import asyncio
import json
import os
import time
from pathlib import Path

from common.proc import family, memory, node_processes, open_fds, processes, threads

DISK_KINDS = ("checkpoints", "chunks", "logs", "metrics", "other")


def disk_kind(rel: Path) -> str:
    """Which part of a node's run folder a file (path relative to the folder) counts under."""
    top = rel.parts[0]
    if top == "checkpoints":
        return "checkpoints"
    if top == "broadcast":  # weight chunks and the manifests that list them (node/broadcast/store.py)
        return "chunks"
    if rel.suffix == ".log":
        return "logs"
    if rel.name == "metrics.jsonl":
        return "metrics"
    return "other"


def folder_bytes(d: Path) -> dict:
    """A node folder's bytes by kind, and its complete checkpoints (``step_*`` with a manifest)."""
    out = dict.fromkeys(DISK_KINDS, 0)
    # os.walk, not Path.rglob: a folder removed while it is listed (a checkpoint pruned or renamed
    # under a kill) is skipped, where rglob raised and ended the sampling, and with it the soak.
    for root, _, files in os.walk(d):
        for name in files:
            p = Path(root) / name
            try:
                out[disk_kind(p.relative_to(d))] += p.stat().st_size
            except OSError:  # gone between the listing and the stat (a checkpoint pruned, a chunk renamed)
                continue
    ckpt = d / "checkpoints"
    names = sorted(c.name for c in ckpt.glob("step_*")) if ckpt.is_dir() else []
    out["n_checkpoints"] = sum(1 for n in names if (ckpt / n / "MANIFEST.json").is_file())
    out["checkpoint_dirs"] = names  # complete ones and any being written (.tmp-) or retired (.old-, .del-)
    return out


def read_status(d: Path) -> dict:
    try:
        return json.loads((d / "status.json").read_text())
    except (OSError, ValueError):
        return {}


def process_reading(pid: int, procs) -> dict:
    """One process's resident memory, descriptors and threads, and its p2p daemons' (summed)."""
    m = memory(pid)
    cmd = {q.pid: q.cmdline for q in procs}
    daemons = [p for p in family(pid, procs) if p != pid and b"p2pd" in cmd.get(p, b"")]
    dm = [memory(p) for p in daemons]
    return {"pid": pid, "rss": m.rss if m else 0, "fds": open_fds(pid), "threads": len(threads(pid)),
            "p2pd": daemons, "p2pd_rss": sum(x.rss for x in dm if x), "p2pd_fds": sum(open_fds(p) or 0 for p in daemons)}


class SoakSampler:
    """Every ``every`` seconds, one sample of every process and node folder of the sim in ``run_dir``."""

    def __init__(self, run_dir: Path, nodes: int, adversaries: int, honest_ids: list[str], every: float = 10.0):
        self.run_dir = run_dir
        self.nodes = nodes
        self.adversaries = adversaries
        self.honest = set(honest_ids)
        self.every = every
        self.samples: list[dict] = []

    def _named_pids(self) -> tuple[dict[str, int], list]:
        procs = processes()
        named = {}
        for i in range(self.nodes):
            pids = node_processes(procs, str(self.run_dir / f"node{i}"))
            if pids:
                named[f"node{i}"] = pids[0]
        for j in range(self.adversaries):
            pids = node_processes(procs, str(self.run_dir / f"adversary{j}"))
            if pids:
                named[f"adversary{j}"] = pids[0]
        maddr = str(self.run_dir / "bootstrap.maddr").encode()
        boot = [p.pid for p in procs if b"swarm_node.node.cli\0bootstrap\0" in p.cmdline and maddr in p.cmdline]
        if boot:
            named["bootstrap"] = boot[0]
        return named, procs

    def sample(self) -> dict:
        named, procs = self._named_pids()
        s = {"t": time.time(), "procs": {n: process_reading(pid, procs) for n, pid in named.items()},
             "disk": {}, "nodes": {}}
        for i in range(self.nodes):
            d = self.run_dir / f"node{i}"
            s["disk"][f"node{i}"] = folder_bytes(d) if d.is_dir() else \
                {**dict.fromkeys(DISK_KINDS, 0), "n_checkpoints": 0, "checkpoint_dirs": []}
            st = read_status(d)
            sw, b = st.get("swarm") or {}, st.get("broadcast") or {}
            s["nodes"][f"node{i}"] = {
                "step": st.get("step"), "phase": st.get("phase"),
                "honest_in": sum(v for p, v in (sw.get("groups_in_by_peer") or {}).items() if p in self.honest),
                "groups_in": sw.get("groups_in"), "found_via": sw.get("found_via"),
                "role": b.get("role"), "lag": b.get("lag"), "max_staleness": b.get("max_staleness"),
                "applied_version": b.get("applied_version"), "published_version": b.get("published_version")}
        self.samples.append(s)
        with (self.run_dir / "samples.jsonl").open("a") as f:
            f.write(json.dumps(s) + "\n")
        return s

    async def run(self) -> None:
        while True:
            await asyncio.to_thread(self.sample)
            await asyncio.sleep(self.every)
