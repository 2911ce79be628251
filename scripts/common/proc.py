"""Every /proc reader the scripts use (Linux): one reader per fact, each beside a pure parser of
the file's text so the parsing is tested on sample text.

- a process's resident memory and its peak (``/proc/PID/status``: VmRSS, VmHWM);
- a process's CPU seconds and parent (``/proc/PID/stat``);
- a process's threads (``/proc/PID/task``) and open file descriptors (``/proc/PID/fd``);
- the process table (pid, parent, command line), and the node processes of a run folder in it;
- the machine's busy and total CPU time (``/proc/stat``), and the busy share between two readings;
- resetting this process's peak to its current resident memory (``/proc/self/clear_refs``).

A process that is gone (or a /proc that is not there) reads as nothing: zero, None or empty, as
each reader says; samplers call them on processes that may exit at any moment.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

PROC = Path("/proc")


# -- resident memory ------------------------------------------------------------------------------
@dataclass(frozen=True)
class Memory:
    """A process's resident memory now and its peak so far, in bytes (0 where the kernel gives
    none, as for a zombie)."""

    rss: int  # VmRSS
    peak: int  # VmHWM


def parse_memory(status_text: str) -> Memory:
    """VmRSS and VmHWM of a ``/proc/PID/status`` text (lines like ``VmRSS:    1234 kB``)."""
    kb: dict[str, int] = {}
    for line in status_text.splitlines():
        key, _, rest = line.partition(":")
        if key in ("VmRSS", "VmHWM"):
            kb[key] = int(rest.split()[0])
    return Memory(rss=kb.get("VmRSS", 0) * 1024, peak=kb.get("VmHWM", 0) * 1024)


def memory(pid: int | str = "self") -> Memory | None:
    """A process's resident memory and peak; None when it is gone (or there is no /proc)."""
    try:
        return parse_memory((PROC / str(pid) / "status").read_text())
    except (OSError, IndexError, ValueError):
        return None


def reset_peak() -> None:
    """This process's peak (VmHWM) set to its resident memory now, so the next peak read is of
    what comes after (``5`` to clear_refs; Linux 4.0+)."""
    (PROC / "self" / "clear_refs").write_text("5")


# -- CPU time and parentage -----------------------------------------------------------------------
@dataclass(frozen=True)
class Stat:
    """What the scripts read of ``/proc/PID/stat``."""

    ppid: int
    cpu_ticks: int  # user + system time, in clock ticks (SC_CLK_TCK a second)


def parse_stat(stat_text: str) -> Stat:
    """The parent and the user + system ticks of a ``/proc/PID/stat`` text. The command name (the
    second field, in parentheses) may hold spaces and parentheses itself: the fields are counted
    from the last ``)``."""
    fields = stat_text.rsplit(")", 1)[1].split()  # state ppid pgrp ... utime (12th) stime (13th)
    return Stat(ppid=int(fields[1]), cpu_ticks=int(fields[11]) + int(fields[12]))


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of a process so far, 0 when it is gone."""
    try:
        ticks = parse_stat((PROC / str(pid) / "stat").read_text()).cpu_ticks
    except (OSError, IndexError, ValueError):
        return 0.0
    return ticks / os.sysconf("SC_CLK_TCK")


# -- threads and the process table ----------------------------------------------------------------
def threads(pid: int) -> list[int]:
    """The thread ids of a process (the main thread's is its pid); empty when it is gone."""
    try:
        return [int(t) for t in os.listdir(PROC / str(pid) / "task")]
    except OSError:
        return []


def open_fds(pid: int) -> int | None:
    """How many file descriptors a process holds open; None when it is gone (or not ours to read)."""
    try:
        return len(os.listdir(PROC / str(pid) / "fd"))
    except OSError:
        return None


@dataclass(frozen=True)
class Process:
    """One row of the process table."""

    pid: int
    ppid: int
    cmdline: bytes  # the arguments, each ended by a NUL byte


def processes() -> list[Process]:
    """Every process there is now (those that exit while being read are left out)."""
    out = []
    for d in PROC.iterdir():
        if not d.name.isdigit():
            continue
        try:
            out.append(Process(int(d.name), parse_stat((d / "stat").read_text()).ppid, (d / "cmdline").read_bytes()))
        except (OSError, IndexError, ValueError):
            continue
    return out


def node_processes(procs: list[Process], run_dir: str) -> list[int]:
    """The pids of the ``swarm_node.node.cli`` processes started with ``--run.dir run_dir`` (a
    node of a sim, an adversary)."""
    want = b"\0--run.dir\0" + run_dir.encode() + b"\0"
    return [p.pid for p in procs if b"swarm_node.node.cli" in p.cmdline and want in p.cmdline + b"\0"]


def family(pid: int, procs: list[Process]) -> list[int]:
    """``pid`` and all its descendants in ``procs`` (a node's DHT process, and that one's p2p daemon)."""
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        out.append(p)
        todo += [c.pid for c in procs if c.ppid == p]
    return out


# -- the machine's CPU ----------------------------------------------------------------------------
def parse_machine_jiffies(stat_text: str) -> tuple[int, int]:
    """(busy, total) CPU time of the whole machine from a ``/proc/stat`` text, in clock ticks:
    the first line's user, nice, system, idle, iowait, irq, softirq and steal; busy is all but
    idle and iowait."""
    user, nice, system, idle, iowait, irq, softirq, steal = map(int, stat_text.split("\n", 1)[0].split()[1:9])
    total = user + nice + system + idle + iowait + irq + softirq + steal
    return total - idle - iowait, total


def machine_jiffies() -> tuple[int, int] | None:
    """(busy, total) CPU time of the whole machine now, or None without a readable /proc/stat."""
    try:
        with open(PROC / "stat") as f:
            return parse_machine_jiffies(f.readline())
    except (OSError, ValueError):
        return None


def busy_share(before: tuple[int, int] | None, after: tuple[int, int] | None) -> float | None:
    """Share of all cores busy between two ``machine_jiffies`` readings (every process: the
    benchmark's, its daemons', the rest); None when either is missing or no time passed."""
    if before is None or after is None or after[1] == before[1]:
        return None
    return (after[0] - before[0]) / (after[1] - before[1])
