"""The ``[[kill]]`` faults of ``swarm-node sim``, carried out: kill -9 a node once it reaches a
step (``at_step``) or once a time has passed since the launch (``at_seconds``), restart it with
``--resume`` after a pause, and count the restarts (the table and the summary show them).
"""

from __future__ import annotations

import logging
import time
from pathlib import Path
from typing import Callable

from swarm_node.node.sim.children import Children
from swarm_node.node.sim.preflight import newest_checkpoint_step
from swarm_node.node.sim.spec import SimSpec
from swarm_node.node.sim.table import status_rows
from swarm_node.node.sim.timed import record_event

log = logging.getLogger(__name__)


class KillFaults:
    """Carries out ``[[kill]]`` faults: kill -9 at a step, restart with --resume after a pause."""

    def __init__(self, spec: SimSpec, kids: Children, node_cmd: Callable[[int], tuple[list[str], Path]]):
        self.spec = spec
        self.kids = kids
        self.node_cmd = node_cmd  # i -> (args, log path)
        self.pending = list(spec.faults.kill)
        self.down: dict[int, float] = {}  # node -> restart time
        self.restarts: dict[int, int] = {i: 0 for i in range(spec.nodes)}
        self.done: list[dict] = []  # each kill carried out: node, time, step, checkpoint resumed from

    def _current_step(self, i: int) -> int:
        """Node i's step, from a status written by its current process (not a predecessor's)."""
        row = status_rows(self.spec, self, self.kids)[i]
        return int(row["step"] or 0)

    def _due(self, k, step: int, now: float) -> bool:
        if k.at_seconds is not None:
            return now >= (self.spec.partition_start or now) + k.at_seconds
        return step >= k.at_step

    def step(self) -> None:
        now = time.time()
        for k in list(self.pending):
            if k.node in self.down:
                continue
            step = self._current_step(k.node)
            if self._due(k, step, now):
                self.pending.remove(k)
                if self.kids.kill(f"node{k.node}"):
                    ckpt = newest_checkpoint_step(self.spec.run_dir / f"node{k.node}")
                    log.info("fault: killed node%d at step %d; restart in %.0f s, resuming from %s", k.node, step,
                             k.down_seconds, f"step {ckpt}" if ckpt else "step 0 (no checkpoint yet)")
                    self.down[k.node] = now + k.down_seconds
                    self.done.append({"node": k.node, "at": now, "step": step, "checkpoint": ckpt})
                    record_event(self.spec.run_dir, "kill", node=k.node, step=step, checkpoint=ckpt)
                else:
                    log.warning("fault: node%d had already exited at step %d; not killed or restarted", k.node, step)
        for i, when in list(self.down.items()):
            if now >= when:
                args, log_path = self.node_cmd(i)
                self.kids.spawn(f"node{i}", [*args, "--resume"], log_path)
                self.restarts[i] += 1
                record_event(self.spec.run_dir, "restart", node=i)
                del self.down[i]
                log.info("fault: restarted node%d", i)

    @property
    def waiting(self) -> bool:
        """A killed node is waiting for its restart: the run is not over yet."""
        return bool(self.down)
