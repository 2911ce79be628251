"""The faults of ``swarm-node sim`` that follow the clock: ``[[malicious]]`` peers started and
killed at set times (attack phases), and ``[[bootstrap_outage]]``, the bootstrap peer killed and
restarted on the same address and identity after a while (joins meanwhile go through each
node's peer cache). Times count from the nodes' launch, as partitions do.

Every fault carried out, kills included (node/sim/kills.py), is also written as one line of
``faults.jsonl`` in the run folder (``record_event``): a timeline a script can put beside its
own samples.
"""

from __future__ import annotations

import json
import logging
import re
import time
from pathlib import Path
from typing import Callable

from swarm_node.node.sim.children import Children
from swarm_node.node.sim.spec import SimSpec

log = logging.getLogger(__name__)

EVENTS_FILE = "faults.jsonl"


def record_event(run_dir: Path, what: str, **fields) -> None:
    """Append one fault carried out (``what``: kill, restart, adversary_start, ...) to faults.jsonl."""
    with (run_dir / EVENTS_FILE).open("a") as f:
        f.write(json.dumps({"at": time.time(), "what": what, **fields}) + "\n")


def read_events(run_dir: Path) -> list[dict]:
    """faults.jsonl's events, oldest first ([] when there is none)."""
    try:
        lines = (run_dir / EVENTS_FILE).read_text().splitlines()
    except OSError:
        return []
    return [json.loads(x) for x in lines if x.strip()]


def maddr_port(maddr: str) -> int:
    """The TCP port of a multiaddr such as ``/ip4/127.0.0.1/tcp/40123/p2p/Qm...``."""
    m = re.search(r"/tcp/(\d+)", maddr)
    if m is None:
        raise ValueError(f"no /tcp/ port in {maddr!r}")
    return int(m.group(1))


class TimedFaults:
    """Starts and kills the ``[[malicious]]`` peers at their times, and stops and restarts the
    bootstrap peer for each ``[[bootstrap_outage]]``; ``step`` is called twice a second."""

    def __init__(self, spec: SimSpec, kids: Children, adversary_cmd: Callable[[int], tuple[list[str], Path]],
                 restart_bootstrap: Callable[[int], object]):
        self.spec = spec
        self.kids = kids
        self.adversary_cmd = adversary_cmd  # j -> (args, log path)
        self.restart_bootstrap = restart_bootstrap  # port -> the new process
        self.t0 = spec.partition_start or time.time()
        self.adversaries = ["waiting"] * len(spec.faults.malicious)  # waiting, running, done
        self.outages = ["waiting"] * len(spec.faults.bootstrap_outage)
        self.port: int | None = None  # the bootstrap peer's, read before its first stop

    def step(self) -> None:
        elapsed = time.time() - self.t0
        for j, m in enumerate(self.spec.faults.malicious):
            if self.adversaries[j] == "waiting" and elapsed >= m.after_seconds:
                args, log_path = self.adversary_cmd(j)
                self.kids.spawn(f"adversary{j}", args, log_path)
                self.adversaries[j] = "running"
                record_event(self.spec.run_dir, "adversary_start", name=f"adversary{j}", attacks=m.attacks)
                log.info("fault: adversary%d started (%s)", j, ", ".join(m.attacks))
            elif (self.adversaries[j] == "running" and m.duration_seconds is not None
                  and elapsed >= m.after_seconds + m.duration_seconds):
                self.kids.kill(f"adversary{j}")
                self.adversaries[j] = "done"
                record_event(self.spec.run_dir, "adversary_stop", name=f"adversary{j}")
                log.info("fault: adversary%d stopped", j)
        for k, o in enumerate(self.spec.faults.bootstrap_outage):
            if self.outages[k] == "waiting" and elapsed >= o.after_seconds:
                if self.port is None:
                    self.port = maddr_port((self.spec.run_dir / "bootstrap.maddr").read_text().split()[0])
                self.kids.kill("bootstrap")
                self.outages[k] = "down"
                record_event(self.spec.run_dir, "bootstrap_stop", port=self.port)
                log.info("fault: bootstrap peer stopped for %.0f s", o.duration_seconds)
            elif self.outages[k] == "down" and elapsed >= o.after_seconds + o.duration_seconds:
                self.restart_bootstrap(self.port)
                self.outages[k] = "done"
                record_event(self.spec.run_dir, "bootstrap_start", port=self.port)
                log.info("fault: bootstrap peer restarted on port %d", self.port)
