"""What the attack suite samples while a scenario runs: every second, each honest node's process
(found by its ``--run.dir``) and its p2p daemon read for resident memory, and the CPU seconds of
the honest nodes and of the adversary, each with its descendants; the adversary kept at the lowest
CPU priority. The readings come from common/proc.py."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

from common.proc import Memory, cpu_seconds, family, memory, node_processes, processes, threads

ADVERSARY_NICE = 19  # see lower_priority
NO_MEMORY = Memory(rss=0, peak=0)  # a process gone between the table and its status


def lower_priority(pid: int, done: set) -> None:
    """The adversary runs at the lowest CPU priority: on one machine, its own work (signing 200
    entries a round, building 4 MiB batches) would otherwise be charged to the defence, where in a
    real swarm it runs on the attacker's hardware. What the attack costs the honest nodes shows in
    their CPU seconds; the adversary's status shows it kept its rate. Every thread: Linux keeps
    a nice value per thread, and the batches are built in worker threads (``done``: the thread
    ids already lowered)."""
    for tid in threads(pid):  # none when it is gone already
        if tid not in done:
            try:
                os.setpriority(os.PRIO_PROCESS, tid, ADVERSARY_NICE)
                done.add(tid)
            except OSError:
                pass


class MemorySampler:
    """Peak resident memory of each honest node's process and of its p2p daemon: every second,
    the node processes are found by their ``--run.dir`` and their VmHWM read."""

    def __init__(self, node_dirs: list[Path], adversary_dir: Path | None = None):
        self.node_dirs = [str(d) for d in node_dirs]
        self.adversary_dir = str(adversary_dir) if adversary_dir else None
        self.cpu: dict[int, float] = {}  # pid -> CPU seconds, honest nodes and their p2pds
        self.adversary_cpu: dict[int, float] = {}  # pid -> CPU seconds, the adversary and its p2pds
        self._reniced: set[int] = set()  # the adversary's thread ids at ADVERSARY_NICE
        self.node_peak = [0] * len(node_dirs)
        self.p2pd_peak = [0] * len(node_dirs)
        self.series: list[list[int]] = [[] for _ in node_dirs]  # VmRSS of each sample while the node ran

    def growth(self, i: int) -> int | None:
        """How much higher node i's resident memory got in the last third of its samples than in
        the middle third (bytes): near 0 once the pool has filled to its caps."""
        xs = self.series[i]
        if len(xs) < 9:
            return None
        third = len(xs) // 3
        return max(xs[-third:]) - max(xs[third:-third])

    def sample(self) -> None:
        procs = processes()
        if self.adversary_dir:
            for pid in node_processes(procs, self.adversary_dir):
                for p in family(pid, procs):
                    lower_priority(p, self._reniced)
                    self.adversary_cpu[p] = max(self.adversary_cpu.get(p, 0.0), cpu_seconds(p))
        for i, d in enumerate(self.node_dirs):
            for pid in node_processes(procs, d):
                for p in family(pid, procs):
                    self.cpu[p] = max(self.cpu.get(p, 0.0), cpu_seconds(p))
                m = memory(pid) or NO_MEMORY
                self.node_peak[i] = max(self.node_peak[i], m.peak, m.rss)
                if m.rss:
                    self.series[i].append(m.rss)
                for c in procs:
                    if c.ppid == pid and b"p2pd" in c.cmdline:
                        cm = memory(c.pid) or NO_MEMORY
                        self.p2pd_peak[i] = max(self.p2pd_peak[i], cm.peak, cm.rss)

    async def run(self) -> None:
        while True:
            await asyncio.to_thread(self.sample)
            await asyncio.sleep(1.0)
