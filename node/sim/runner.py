"""``swarm-node sim``: a whole swarm on one machine, with one live status table.

Over ``hivemind`` the simulator starts a bootstrap peer and N ``swarm-node join`` processes on
127.0.0.1, exactly as users run them, each with its own run folder, identity and seed; over
``mqtt`` a local Mosquitto (node/transport/mqtt/broker.py, anonymous, loopback only) in place of the bootstrap
peer, and the same N processes joined with ``--transport mqtt``; over ``libp2p`` a py-libp2p
bootstrap host (no daemon) and N processes joined with ``--transport libp2p``. The
in-process ``memory`` transport cannot cross processes, so with it the N nodes run in one child
process sharing a hub (``swarm-node sim-worker``). Either way the simulator itself only launches,
watches (each node's ``status.json``) and stops; it trains nothing.

Every child runs in its own session (so a terminal's Ctrl-C reaches the simulator alone, which
then stops the nodes in order: SIGTERM, each checkpoints, SIGKILL after a grace period) and is
told by the kernel to exit if the simulator dies (``PR_SET_PDEATHSIG``): no orphans, even after
``kill -9`` of the simulator.

Run folder::

    sim.json             the command, nodes, transport, start/end
    node0/ … nodeN-1/    each node's own run folder (metrics.jsonl, status.json, checkpoints, log)
    summary.json, summary.md   one row per node: steps, correctness first/last, groups, rejections
    reward.png, ess.png  correctness and ESS/B per node over steps
"""

from __future__ import annotations

import asyncio
import ctypes
import json
import logging
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from node.sim.adversary import ATTACKS, DEFAULT_ATTACKS
from node.run.config import read_toml
from node.errors import ConfigError, NodeError
from node.observe.status import describe_phase

log = logging.getLogger(__name__)

__all__ = ["SimSpec", "SimFaults", "load_faults", "run_sim"]

GRACE_S = 30.0  # how long a node may take to checkpoint and exit after SIGTERM
_PR_SET_PDEATHSIG = 1
LOOPBACK = ["--swarm.host_maddrs", '["/ip4/127.0.0.1/tcp/0"]', "--swarm.use_relay", "false",
            "--swarm.nat_port_map", "false"]


try:  # resolved here, in the parent: the child between fork and exec must not load libraries
    _prctl = ctypes.CDLL("libc.so.6", use_errno=True).prctl
except (OSError, AttributeError):  # not Linux: the sessions and the simulator's own cleanup still apply
    _prctl = None


def _die_with_parent() -> None:  # runs in the child between fork and exec
    if _prctl is not None:
        _prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)


class NodeOverride(_Strict):
    index: int = Field(ge=0, description="which node")
    flags: dict[str, Any] = Field(description="--section.key values for this node only, e.g. "
                                               "train.behaviour_lag = 8 (stale) or model.name = PATH (heterogeneous)")


class KillFault(_Strict):
    node: int = Field(ge=0)
    at_step: int = Field(ge=1, description="kill -9 the node once it has trained this many steps")
    down_seconds: float = Field(5.0, ge=0, description="then restart it with --resume after this long")


class PartitionFault(_Strict):
    groups: list[list[int]] = Field(description="node indices on each side, e.g. [[0, 1], [2, 3]]")
    after_seconds: float = Field(ge=0, description="the partition starts this long after the nodes are launched")
    duration_seconds: float = Field(gt=0, description="and lasts this long")


class LatencyFault(_Strict):
    node: int = Field(ge=0)
    delay_seconds: float = Field(ge=0, description="every delivery to this node is held this long")
    jitter_seconds: float = Field(0.0, ge=0, description="plus up to this long, uniformly at random")


class MaliciousFault(_Strict):
    attacks: list[str] = Field(default_factory=lambda: list(DEFAULT_ATTACKS), min_length=1, description="attacks to cycle through (default: the envelope attacks every honest node must refuse; node/sim/adversary.py lists all, including the DHT, flood and admitted-by-design ones)")


class SimFaults(_Strict):
    """A ``--faults`` file: ``[[node]]``, ``[[kill]]``, ``[[malicious]]``, ``[[partition]]`` and
    ``[[latency]]`` tables (docs/running.md)."""

    node: list[NodeOverride] = []
    kill: list[KillFault] = []
    malicious: list[MaliciousFault] = []
    partition: list[PartitionFault] = []
    latency: list[LatencyFault] = []

    def check(self, n_nodes: int, transport: str) -> None:
        named = ([x.index for x in self.node] + [k.node for k in self.kill] + [x.node for x in self.latency]
                 + [i for p in self.partition for g in p.groups for i in g])
        bad = sorted({i for i in named if i >= n_nodes})
        if bad:
            raise ConfigError(f"faults name nodes {bad}, but there are only {n_nodes} (node0..node{n_nodes - 1})")
        unknown = [a for m in self.malicious for a in m.attacks if a not in ATTACKS]
        if unknown:
            raise ConfigError(f"unknown attacks {unknown}; choose from {', '.join(ATTACKS)}")
        if len(self.partition) > 1:
            raise ConfigError("one [[partition]] at a time is supported")
        for p in self.partition:
            members = [i for g in p.groups for i in g]
            if len(p.groups) < 2 or len(members) != len(set(members)):
                raise ConfigError(f"[[partition]] groups {p.groups}: at least two groups, no node in two")
        if (self.kill or self.malicious or self.node or self.partition or self.latency) and transport == "memory":
            raise ConfigError("faults need --transport hivemind, mqtt or libp2p (the memory simulation runs every node in "
                              "one process)")
        from node.sim.adversary import RAW_ATTACKS, SYBIL_ATTACKS

        dht = sorted({a for m in self.malicious for a in m.attacks if a in RAW_ATTACKS + SYBIL_ATTACKS})
        if dht and transport != "hivemind":
            raise ConfigError(f"attacks {dht} write into the hivemind DHT: use them with --transport hivemind")


def load_faults(path: Path | None) -> SimFaults:
    if path is None:
        return SimFaults()
    data = read_toml(path, "faults file")
    try:
        return SimFaults.model_validate(data)
    except ValidationError as e:
        raise ConfigError(f"faults file {path}: {e}") from e


@dataclass
class SimSpec:
    nodes: int
    transport: str  # "hivemind" | "mqtt" | "libp2p" | "memory"
    run_dir: Path
    config: Path | None = None
    overrides: dict[str, str] = field(default_factory=dict)  # --section.key flags for every node (raw text)
    seed: int = 0
    progress: str = "auto"
    startup_timeout: float = 120.0
    faults: SimFaults = field(default_factory=SimFaults)
    build_default_model: bool = False  # build the embedded model once before starting the nodes
    peer_ids: list[str] = field(default_factory=list)  # node i's peer id (identities made up front)
    roles: str = "full"  # "full", or "learner-workers": node0 a learner, the others its workers
    partition_start: float | None = None  # unix time the nodes were launched


def newest_checkpoint_step(node_dir: Path) -> int | None:
    """Step of the checkpoint a node in ``node_dir`` would resume from (the newest that
    verifies: a corrupt newer one does not count), None if there is none."""
    from node.run.checkpoint import checkpoint_step, newest_valid

    found = newest_valid(node_dir / "checkpoints")
    return checkpoint_step(found) if found is not None else None


def check_prior_run(spec: SimSpec, steps: list[int], resume: bool) -> str | None:
    """What an earlier run in ``spec.run_dir`` means for this one, before anything starts.

    Returns a message when every node has already trained its steps (the caller says so and
    exits 0); raises ``ConfigError`` when the folder holds checkpoints and this run would start
    over (every node would refuse); None when there is work to do.
    """
    done = [newest_checkpoint_step(spec.run_dir / f"node{i}") for i in range(spec.nodes)]
    if not resume:
        has = [f"node{i} (step {d})" for i, d in enumerate(done) if d is not None]
        if has:
            raise ConfigError(f"{spec.run_dir} already holds a run with checkpoints ({', '.join(has)}): pass "
                              f"--resume (or run.resume = true) to continue it, or choose another --run.dir")
        return None
    if all(d is not None and d >= n for d, n in zip(done, steps)):
        return (f"{spec.run_dir}: every node has already trained its {max(steps)} steps, so there is "
                f"nothing to do. To train on, raise the step count (e.g. --train.steps {2 * max(steps)}, or "
                f"make demo DEMO_ARGS=\"--train.steps {2 * max(steps)}\"); to start over, choose another "
                f"--run.dir or delete {spec.run_dir}.")
    return None


def startup_warnings(spec: SimSpec, cfgs: list) -> list[str]:
    """Things about this run a user should know before it starts (not errors: it can run);
    ``cfgs[i]`` is node i's config."""
    from node.run.config import batch_overlap

    out = []
    for k in spec.faults.kill:
        every = cfgs[k.node].run.checkpoint_every
        # A kill at the checkpoint's own step resumes from it (the node writes the checkpoint
        # before the status that triggers the kill): only earlier kills lose their steps.
        if every == 0 or k.at_step < every:
            first = "at the end" if every == 0 else f"at step {every}"
            out.append(f"[[kill]] node{k.node} at step {k.at_step}: its first checkpoint is {first} "
                       f"(run.checkpoint_every = {every}), so it restarts from step 0 and redoes "
                       f"{k.at_step} steps; to resume where it was killed, pass --run.checkpoint_every "
                       f"{k.at_step} or less")
    c = cfgs[0]
    advice = batch_overlap(spec.nodes - 1, c.generation.prompts_per_step, c.swarm.external_groups,
                           c.swarm.max_sender_share)
    if advice is not None and all(x.generation.prompts_per_step == c.generation.prompts_per_step
                                  and x.swarm.external_groups == c.swarm.external_groups
                                  and x.swarm.max_sender_share == c.swarm.max_sender_share for x in cfgs):
        out.append(f"with {spec.nodes} nodes, {advice[0].lower()}{advice[1:]}")
    return out


def node_log(spec: SimSpec, i: int) -> Path:
    """Where node i's output goes: its own node.log over hivemind, the one worker's nodes.log
    over memory (every node runs in that one process)."""
    return spec.run_dir / ("nodes.log" if spec.transport == "memory" else f"node{i}/node.log")


def processes(spec: "SimSpec") -> bool:
    """Whether the nodes are processes of their own (hivemind, mqtt, libp2p) or one worker's (memory)."""
    return spec.transport != "memory"


class _Children:
    """The processes the simulator owns."""

    def __init__(self) -> None:
        self.procs: list[tuple[str, subprocess.Popen]] = []
        self.started: dict[int, float] = {}  # id(proc) -> launch time
        self.killed: set[int] = set()  # id(proc) of processes killed on purpose (faults)
        self.terminated = False  # the simulator has sent SIGTERM to stop the run

    def spawn(self, name: str, args: list[str], log_path: Path) -> subprocess.Popen:
        env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONUNBUFFERED="1")
        # The children share the simulator's working directory, so relative paths mean the same.
        with log_path.open("ab") as f:
            p = subprocess.Popen([sys.executable, "-m", "node.cli", *args], stdout=f, stderr=subprocess.STDOUT,
                                 stdin=subprocess.DEVNULL, env=env, start_new_session=True,
                                 preexec_fn=_die_with_parent)
        self.procs.append((name, p))
        self.started[id(p)] = time.time()
        return p

    @staticmethod
    def _kill_group(p: subprocess.Popen) -> None:
        # Each child leads its own session: the group holds its p2p daemon too, which would
        # otherwise outlive a kill -9 (and keep the p2p identity busy for a restart).
        try:
            os.killpg(p.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            p.kill()
        p.wait()

    def kill(self, name: str) -> bool:
        """kill -9 the live process called ``name`` (and its daemon); False if none was alive."""
        for n, p in self.procs:
            if n == name and p.poll() is None:
                self._kill_group(p)
                self.killed.add(id(p))
                return True
        return False

    def signal_all(self, sig: int, names: set[str] | None = None) -> None:
        for name, p in self.procs:
            if p.poll() is None and (names is None or name in names):
                try:
                    p.send_signal(sig)
                except ProcessLookupError:
                    pass

    def stop(self, grace: float = GRACE_S) -> None:
        """Nodes first (they checkpoint on SIGTERM), then the bootstrap; SIGKILL what lingers."""
        nodes = {n for n, _ in self.procs if n != "bootstrap"}
        self.terminated = True
        for group in (nodes, {"bootstrap"}):
            self.signal_all(signal.SIGTERM, group)
            deadline = time.time() + grace
            for name, p in self.procs:
                if name in group:
                    try:
                        p.wait(timeout=max(0.1, deadline - time.time()))
                    except subprocess.TimeoutExpired:
                        log.warning("%s did not stop in %.0f s: killing it", name, grace)
                        self._kill_group(p)

    def current(self, name: str) -> subprocess.Popen | None:
        """The newest process started under ``name`` (a restarted node's replacement)."""
        return next((p for n, p in reversed(self.procs) if n == name), None)

    def alive(self) -> list[str]:
        return [n for n, p in self.procs if p.poll() is None]


def _flags(overrides: dict[str, str]) -> list[str]:
    out = []
    for k, v in overrides.items():
        out += [f"--{k}", v]
    return out


def _raw(v: Any) -> str:
    """A config value as flag text the child parses back to the same value (TOML syntax)."""
    if isinstance(v, str):
        return v
    if isinstance(v, float) and (v != v or v in (float("inf"), float("-inf"))):
        return "nan" if v != v else ("inf" if v > 0 else "-inf")
    return json.dumps(v, ensure_ascii=False)


ROLE_LAYOUTS = ("full", "learner-workers")


def role_flags(layout: str, i: int, learner_id: str) -> dict[str, str]:
    """Node i's role flags: with ``learner-workers`` node0 publishes its weights and every other
    node follows them (node/broadcast/roles.py)."""
    if layout == "full":
        return {}
    if i == 0:
        return {"broadcast.role": "learner"}
    return {"broadcast.role": "worker", "broadcast.follow": learner_id}


def _node_args(spec: SimSpec, i: int) -> list[str]:
    node_dir = spec.run_dir / f"node{i}"
    args = ["--run.dir", str(node_dir), "--run.progress", "off", "--train.threads", "1",
            "--train.seed", str(spec.seed + i), "--run.plot", "false"]
    if spec.config is not None:
        args = ["--config", str(spec.config), *args]
    per_node = role_flags(spec.roles, i, spec.peer_ids[0] if spec.peer_ids else "")
    per_node |= {k: _raw(v) for o in spec.faults.node if o.index == i for k, v in o.flags.items()}
    port = spec.overrides.get("run.metrics_port")
    if port and port.lower() not in ("0", "none", "off", "null"):  # one port per node
        per_node["run.metrics_port"] = str(int(port) + i)
    for lat in spec.faults.latency:
        if lat.node == i:
            per_node |= {"faults.delay_seconds": _raw(lat.delay_seconds), "faults.jitter_seconds": _raw(lat.jitter_seconds)}
    for part in spec.faults.partition:  # node i drops the other side's messages during the window
        mine = next((g for g in part.groups if i in g), None)
        if mine is not None and spec.partition_start is not None:
            others = [spec.peer_ids[j] for g in part.groups if g is not mine for j in g]
            start = spec.partition_start + part.after_seconds
            per_node |= {"faults.blocked_peers": json.dumps(others), "faults.blocked_from": _raw(start),
                         "faults.blocked_until": _raw(start + part.duration_seconds)}
    return args + _flags({**spec.overrides, **per_node})


def read_status(node_dir: Path) -> dict | None:
    try:
        return json.loads((node_dir / "status.json").read_text())
    except (OSError, json.JSONDecodeError):
        return None


def status_rows(spec: SimSpec, faults: "_Faults | None" = None, kids: "_Children | None" = None) -> list[dict]:
    """One row per node (and adversary) for the live table, from each node's status.json. With
    ``kids``, a status written before the node's current process started (the last run's, or a
    killed predecessor's) is not shown as current, and a node whose process exited says so."""
    rows = []
    for i in range(spec.nodes):
        st = read_status(spec.run_dir / f"node{i}") or {}
        exited = None
        if kids is not None:
            proc = kids.current(f"node{i}" if processes(spec) else "nodes")
            if proc is not None and st.get("updated_at", 0) < kids.started[id(proc)]:
                st = {}
            if proc is not None and proc.poll() is not None and not (faults and i in faults.down):
                exited = proc.returncode
        last, sw = st.get("last") or {}, st.get("swarm") or {}
        phase = describe_phase(st) if st else "starting"
        if exited not in (None, 0) and st.get("phase") not in ("finished", "stopped"):
            phase = f"exited (rc {exited})" + (f": {st['phase_detail']}" if st.get("phase") == "failed to start" else "")
        rows.append({
            "node": f"node{i}", "round": last.get("round"), "step": st.get("step", 0),
            "total": st.get("total_steps"), "reward": last.get("reward"), "correct": last.get("correct"),
            "ess": last.get("rho"), "lr_factor": last.get("lr_factor"),
            "in": sw.get("groups_used"), "out": sw.get("rollouts_out"), "peers": sw.get("peers_alive"),
            "rejected": sw.get("rejected_total"), "rejected_by": sw.get("rejected") or {},
            "restarts": faults.restarts[i] if faults is not None else 0,
            "down": faults is not None and i in faults.down,
            "partitioned": bool(sw.get("partitioned")), "fault_dropped": sw.get("fault_dropped", 0),
            "delay": sw.get("fault_delay_s", 0.0), "stale": (last.get("staleness") or 0),
            "phase": phase, "note": st.get("note"),
            "link": sw.get("link", "up"), "outages": sw.get("outages", 0),
            "weights": weights_text(st.get("broadcast")),
        })
    for j in range(len(spec.faults.malicious)):
        st = read_status(spec.run_dir / f"adversary{j}") or {}
        rows.append({"node": f"adversary{j}", "adversary": True, "peer_id": st.get("peer_id"),
                     "sent": st.get("sent", {})})
    return rows


def weights_text(b: dict | None) -> str:
    """The live table's weights column: a learner's published version; a worker's applied version,
    its lag behind the learner and a transfer in progress (how far, from whom)."""
    if not b:
        return "-"
    if b.get("role") == "learner":
        return f"publishes v{_fmt(b.get('published_version'))} to {b.get('followers', 0)}"
    text = f"v{_fmt(b.get('applied_version'))} (lag {_fmt(b.get('lag'))})"
    t = b.get("transfer")
    if t:
        src = max(t.get("from") or {"-": 0}, key=lambda k: (t.get("from") or {}).get(k, 0))
        text += f", v{t['version']} {100 * t['bytes'] / max(t['total'], 1):.0f}% from {src[:10]}"
    return text


def _fmt(v, spec: str = "") -> str:
    return "-" if v is None else format(v, spec)


def render_table(rows: list[dict], title: str):
    from rich.table import Table

    t = Table(title=title)
    weights = any(r.get("weights", "-") != "-" for r in rows)
    for col in ("node", "phase", "round", "step", "reward", "correct", "ESS/B", "LR factor", "groups in",
                "rollouts out", "peers", "rejected", "faults") + (("weights",) if weights else ()):
        t.add_column(col, justify="left" if col in ("phase", "weights") else "right")
    for r in rows:
        if r.get("adversary"):
            sent = ", ".join(f"{k} {v}" for k, v in sorted(r["sent"].items()) if v)
            t.add_row(r["node"], "malicious", *["-"] * 10, f"sent {sum(r['sent'].values())} ({sent})",
                      *(["-"] if weights else []))
            continue
        rej = ", ".join(f"{k} {v}" for k, v in sorted(r["rejected_by"].items()))
        fault = " ".join(x for x in (
            "DOWN" if r["down"] else "", f"restarted {r['restarts']}x" if r["restarts"] else "",
            f"LINK {r['link'].upper()}" if r["link"] != "up" else "",
            f"{r['outages']} link outage(s)" if r["outages"] else "",
            "PARTITIONED" if r["partitioned"] else "", f"dropped {r['fault_dropped']}" if r["fault_dropped"] else "",
            f"+{r['delay']:g}s latency" if r["delay"] else "", f"stale {r['stale']:g}" if r["stale"] else "") if x)
        t.add_row(r["node"], "down" if r["down"] else r["phase"], _fmt(r["round"]), f"{r['step']}/{_fmt(r['total'])}",
                  _fmt(r["reward"], ".3f"),
                  _fmt(r["correct"], ".3f"), _fmt(r["ess"], ".3f"), _fmt(r["lr_factor"], ".2f"), _fmt(r["in"]),
                  _fmt(r["out"]), _fmt(r["peers"]), _fmt(r["rejected"]) + (f" ({rej})" if rej else ""), fault,
                  *([r.get("weights", "-")] if weights else []))
    return t


async def _start_bootstrap(spec: SimSpec, kids: _Children, stop: asyncio.Event) -> str | None:
    maddr_file = spec.run_dir / "bootstrap.maddr"
    # An earlier run's file names that run's port: wait for this bootstrap peer's own.
    maddr_file.unlink(missing_ok=True)
    key = "bootstrap.p2p.key" if spec.transport == "hivemind" else "bootstrap.libp2p.pem"
    p = kids.spawn("bootstrap", ["bootstrap", "--transport", spec.transport, "--host", "127.0.0.1", "--port", "0",
                                 "--no-nat", "--no-relay", "--identity", str(spec.run_dir / key),
                                 "--maddr-file", str(maddr_file)], spec.run_dir / "bootstrap.log")
    deadline = time.time() + spec.startup_timeout
    while not maddr_file.exists():
        if stop.is_set():
            return None
        if p.poll() is not None:
            raise RuntimeError(f"the bootstrap peer exited (rc {p.returncode}); see {spec.run_dir / 'bootstrap.log'}")
        if time.time() > deadline:
            raise RuntimeError(f"the bootstrap peer did not start in {spec.startup_timeout:.0f} s")
        await asyncio.sleep(0.2)
    return maddr_file.read_text().split()[0]


async def _start_broker(spec: SimSpec):
    """A Mosquitto for the nodes (anonymous, on a free loopback port), in <run dir>/broker."""
    from node.transport.mqtt.broker import Mosquitto

    broker = Mosquitto(spec.run_dir / "broker", preexec_fn=_die_with_parent)  # BrokerMissing: a ConfigError
    await asyncio.to_thread(broker.start, spec.startup_timeout)
    log.info("sim: Mosquitto listening on %s", broker.url())
    return broker


async def _build_default_model(mode: str, stop: asyncio.Event) -> bool:
    """Build (or find cached) the embedded default model once, here, before the nodes start:
    N nodes building it at once would each spend N times as long on the same cores. False if
    Ctrl-C came first (the build thread is abandoned; its temporary folder is cleaned next time)."""
    from node.daemon_thread import run_in_daemon_thread
    from policies.default_model import ensure_default_model

    news = {"line": "starting", "since": time.time()}

    def progress(line: str) -> None:
        news["line"] = line

    build = asyncio.ensure_future(run_in_daemon_thread(lambda: ensure_default_model(progress=progress)))
    live = None
    if mode == "rich":
        from rich.console import Console
        from rich.live import Live

        live = Live("", console=Console(stderr=True), refresh_per_second=2)
        live.start()
    last_plain = 0.0
    stopped = asyncio.ensure_future(stop.wait())
    try:
        while not build.done():
            text = f"building the embedded default model (once; cached after): {news['line']}, " \
                   f"{time.time() - news['since']:.0f} s"
            if live is not None:
                live.update(text)
            elif mode == "plain" and time.time() - last_plain >= 5:
                last_plain = time.time()
                log.info("sim: %s", text)
            await asyncio.wait({build, stopped}, timeout=0.5, return_when=asyncio.FIRST_COMPLETED)
            if stop.is_set():
                return False
    finally:
        stopped.cancel()
        if not build.done():
            build.cancel()  # the thread itself is abandoned (daemon); its folder is temporary
        if live is not None:
            live.stop()
    try:
        path = build.result()
    except Exception as e:
        raise NodeError(f"building the embedded default model failed: {type(e).__name__}: {e}") from e
    log.info("sim: default model ready at %s (%.0f s)", path, time.time() - news["since"])
    return True


class _Stopped(Exception):
    """Ctrl-C before the nodes were launched."""


class _Faults:
    """Carries out ``[[kill]]`` faults: kill -9 at a step, restart with --resume after a pause."""

    def __init__(self, spec: SimSpec, kids: _Children, node_cmd):
        self.spec = spec
        self.kids = kids
        self.node_cmd = node_cmd  # i -> (args, log path)
        self.pending = list(spec.faults.kill)
        self.down: dict[int, float] = {}  # node -> restart time
        self.restarts: dict[int, int] = {i: 0 for i in range(spec.nodes)}

    def _current_step(self, i: int) -> int:
        """Node i's step, from a status written by its current process (not a predecessor's)."""
        row = status_rows(self.spec, self, self.kids)[i]
        return int(row["step"] or 0)

    def step(self) -> None:
        now = time.time()
        for k in list(self.pending):
            if k.node in self.down:
                continue
            step = self._current_step(k.node)
            if step >= k.at_step:
                self.pending.remove(k)
                if self.kids.kill(f"node{k.node}"):
                    ckpt = newest_checkpoint_step(self.spec.run_dir / f"node{k.node}")
                    log.info("fault: killed node%d at step %d; restart in %.0f s, resuming from %s", k.node, step,
                             k.down_seconds, f"step {ckpt}" if ckpt else "step 0 (no checkpoint yet)")
                    self.down[k.node] = now + k.down_seconds
                else:
                    log.warning("fault: node%d had already exited at step %d; not killed or restarted", k.node, step)
        for i, when in list(self.down.items()):
            if now >= when:
                args, log_path = self.node_cmd(i)
                self.kids.spawn(f"node{i}", [*args, "--resume"], log_path)
                self.restarts[i] += 1
                del self.down[i]
                log.info("fault: restarted node%d", i)

    @property
    def waiting(self) -> bool:
        return bool(self.down)


async def run_sim(spec: SimSpec) -> dict:
    """Launch, watch and stop the swarm; returns the summary (also written to the run folder)."""
    spec.run_dir.mkdir(parents=True, exist_ok=True)
    kids = _Children()
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    t0 = time.time()
    meta = {"nodes": spec.nodes, "transport": spec.transport, "argv": sys.argv, "started_at": t0,
            "overrides": spec.overrides, "config": str(spec.config) if spec.config else None,
            "faults": spec.faults.model_dump()}
    (spec.run_dir / "sim.json").write_text(json.dumps(meta, indent=2))
    mode = spec.progress
    if mode == "auto":
        mode = "rich" if sys.stderr.isatty() else "plain"
    live = None
    interrupted = False
    faults = None
    broker = None
    try:
        if spec.build_default_model:
            if not await _build_default_model(mode, stop):
                raise _Stopped()
        if processes(spec):
            if spec.transport in ("hivemind", "libp2p"):
                maddr = await _start_bootstrap(spec, kids, stop)
                if maddr is None:  # Ctrl-C while the bootstrap peer was starting
                    raise _Stopped()
                how = (["--bootstrap", maddr, *LOOPBACK] if spec.transport == "hivemind" else
                       ["--transport", "libp2p", "--bootstrap", maddr, "--swarm.host_maddrs", '["/ip4/127.0.0.1/tcp/0"]'])
            else:
                broker = await _start_broker(spec)
                how = ["--transport", "mqtt", "--broker", broker.url()]

            def node_cmd(i: int) -> tuple[list[str], Path]:
                return ["join", *how, *_node_args(spec, i)], spec.run_dir / f"node{i}" / "node.log"

            # Identities up front: a partition names the peers on the other side by peer id.
            from protocol.identity import load_or_create_identity

            for i in range(spec.nodes):
                (spec.run_dir / f"node{i}").mkdir(exist_ok=True)
                spec.peer_ids.append(load_or_create_identity(spec.run_dir / f"node{i}" / "identity.pem").peer_id)
            spec.partition_start = time.time()
            for i in range(spec.nodes):
                kids.spawn(f"node{i}", *node_cmd(i))
            for j, m in enumerate(spec.faults.malicious):
                d = spec.run_dir / f"adversary{j}"
                d.mkdir(exist_ok=True)
                base = ["--config", str(spec.config)] if spec.config else []
                adv_how = (["--swarm.transport", "mqtt", "--swarm.broker", broker.url()] if spec.transport == "mqtt"
                           else ["--swarm.transport", "libp2p", *how[1:]] if spec.transport == "libp2p" else how)
                kids.spawn(f"adversary{j}", ["adversary", *adv_how, *base,
                                              *_flags(spec.overrides), "--run.dir", str(d),
                                              "--attacks", ",".join(m.attacks)], d / "adversary.log")
            faults = _Faults(spec, kids, node_cmd)
        else:
            kids.spawn("nodes", ["sim-worker", "--nodes", str(spec.nodes), "--run-dir", str(spec.run_dir),
                                 "--seed", str(spec.seed), *(["--config", str(spec.config)] if spec.config else []),
                                 *_flags(spec.overrides)], spec.run_dir / "nodes.log")
        if mode == "rich":
            from rich.console import Console
            from rich.live import Live

            live = Live(render_table(status_rows(spec, faults, kids), "swarm-node sim"), console=Console(stderr=True),
                        refresh_per_second=2)
            live.start()
        last_plain = 0.0
        node_names = {n for n, _ in kids.procs if n.startswith("node")}

        def running() -> bool:
            return bool(node_names & set(kids.alive())) or (faults is not None and faults.waiting)

        while not stop.is_set() and running():
            if faults is not None:
                faults.step()
            rows = status_rows(spec, faults, kids)
            if live is not None:
                live.update(render_table(rows, f"swarm-node sim · {spec.transport} · {spec.nodes} nodes"))
            elif mode == "plain" and time.time() - last_plain > 10:
                last_plain = time.time()
                log.info("sim: %s", "; ".join(
                    f"{r['node']} {r['phase']} step {r['step']} correct {_fmt(r['correct'], '.3f')} "
                    f"ESS/B {_fmt(r['ess'], '.3f')} in {_fmt(r['in'])} rejected {_fmt(r['rejected'])} "
                    f"restarts {r['restarts']}" + (f" weights {r['weights']}" if r.get("weights", "-") != "-" else "")
                    if not r.get("adversary") else f"{r['node']} sent {r['sent']}" for r in rows))
            try:
                await asyncio.wait_for(stop.wait(), timeout=0.5)
            except asyncio.TimeoutError:
                pass
        interrupted = stop.is_set()
    except _Stopped:
        interrupted = True
    finally:
        if live is not None:
            live.stop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.remove_signal_handler(sig)
        await asyncio.to_thread(kids.stop)
        if broker is not None:
            broker.stop()  # after the nodes: they say goodbye through it
    # Judge each node by its last process; a process the simulator killed (fault) or stopped
    # (SIGTERM before the node could install its handler: -15) did not fail.
    ok = {0, 130} | ({-signal.SIGTERM} if kids.terminated else set())
    last = {n: p for n, p in kids.procs if n.startswith("node")}
    failed = {n: p.returncode for n, p in last.items() if id(p) not in kids.killed and p.returncode not in ok}
    summary = write_summary(spec, time.time() - t0, interrupted, failed, faults)
    return summary


def _fault_text(n: dict) -> str:
    parts = [f"restarted {n['restarts']}x" if n["restarts"] else "",
             f"{n['fault_dropped']} messages dropped (partition)" if n["fault_dropped"] else "",
             f"{n['fault_delayed']} deliveries delayed" if n["fault_delayed"] else ""]
    return ", ".join(p for p in parts if p) or "-"


def write_summary(spec: SimSpec, wall_s: float, interrupted: bool, failed: dict,
                  faults: "_Faults | None" = None) -> dict:
    from node.observe.metrics import read_metrics, summary_window
    from node.observe.plots import plot_swarm

    nodes = []
    records = [read_metrics(spec.run_dir / f"node{i}" / "metrics.jsonl") for i in range(spec.nodes)]
    # One window for every node, so their first/last columns compare like with like.
    w = summary_window(min((len(r) for r in records if r), default=0))
    for i in range(spec.nodes):
        d = spec.run_dir / f"node{i}"
        recs = records[i]
        correct = [r.get("correct") or 0.0 for r in recs]
        st = read_status(d) or {}
        sw = st.get("swarm") or {}
        # What it used over the whole run, from every step's record: status.json covers only the
        # node's last process, and a restarted node may have rejoined after its peers finished.
        by_peer: dict[str, int] = {}
        for r in recs:
            for peer, n in (r.get("external_by_peer") or {}).items():
                by_peer[peer] = by_peer.get(peer, 0) + n
        nodes.append({
            "node": f"node{i}", "peer_id": sw.get("peer_id"), "steps": len(recs),
            "correct_first": sum(correct[:w]) / w if correct else None,
            "correct_last": sum(correct[-w:]) / w if correct else None,
            "groups_used": sum(by_peer.values()), "peers_used": len(by_peer),
            "rollouts_out": sw.get("rollouts_out"), "rejected": sw.get("rejected", {}),
            "rejected_total": sw.get("rejected_total"), "rounds_skipped": (st.get("last") or {}).get("rounds_skipped"),
            "groups_used_by_peer": by_peer,
            "restarts": faults.restarts[i] if faults is not None else 0,
            "fault_dropped": sw.get("fault_dropped", 0), "fault_delayed": sw.get("fault_delayed", 0),
            "note": st.get("note"), "broadcast": st.get("broadcast"),
        })
    adversaries = []
    for j in range(len(spec.faults.malicious)):
        st = read_status(spec.run_dir / f"adversary{j}") or {}
        pid = st.get("peer_id")
        # Groups of the adversary any honest node trained on (must be 0), from every step's record:
        # status.json only covers a node's last process, and a node may have been restarted.
        used = sum((r.get("external_by_peer") or {}).get(pid, 0)
                   for i in range(spec.nodes) for r in read_metrics(spec.run_dir / f"node{i}" / "metrics.jsonl"))
        adversaries.append({"name": f"adversary{j}", "peer_id": pid, "sent": st.get("sent", {}),
                            "refused": st.get("refused", {}), "used_by_honest": used})
    summary = {"nodes": nodes, "adversaries": adversaries, "transport": spec.transport,
               "wall_s": round(wall_s, 1), "interrupted": interrupted, "failed": failed,
               "run_dir": str(spec.run_dir), "window": w}
    summary["plots"] = [str(p) for p in plot_swarm(spec.run_dir, spec.nodes)]
    lines = [f"# swarm-node sim: {spec.nodes} nodes over {spec.transport}", "",
             f"| node | steps | correct first {w} | correct last {w} | peer groups used | peers used | rollouts out | rejected | faults |",
             "|---|---:|---:|---:|---:|---:|---:|---:|---|"]
    for n in nodes:
        rej = ", ".join(f"{k} {v}" for k, v in sorted(n["rejected"].items()))
        lines.append(f"| {n['node']} | {n['steps']} | {_fmt(n['correct_first'], '.3f')} | {_fmt(n['correct_last'], '.3f')} | "
                     f"{_fmt(n['groups_used'])} | {_fmt(n['peers_used'])} | {_fmt(n['rollouts_out'])} | "
                     f"{_fmt(n['rejected_total'])}{f' ({rej})' if rej else ''} | {_fault_text(n)} |")
    roles = [n for n in nodes if n.get("broadcast")]
    if roles:
        lines += ["", "| node | role | weights |", "|---|---|---|"]
        for n in roles:
            b = n["broadcast"]
            what = (f"published {b.get('published_version')} versions, uploaded {b.get('served_bytes', 0) / 1e6:.1f} MB"
                    if b.get("role") == "learner" else
                    f"applied {b.get('applied_versions')} versions (last v{b.get('applied_version')}, lag "
                    f"{b.get('lag')}), forwarded {b.get('served_bytes', 0) / 1e6:.1f} MB, bad chunks "
                    f"{sum((b.get('bad_chunks') or {}).values())}, fallbacks {b.get('fallbacks', 0)}")
            lines.append(f"| {n['node']} | {b.get('role')} | {what} |")
    notes = {n["node"]: n["note"] for n in nodes if n.get("note")}
    for name, note in notes.items():
        lines += ["", f"{name}: {note}"]
    for a in adversaries:
        sent = ", ".join(f"{k} {v}" for k, v in sorted(a["sent"].items()) if v)
        refused = ", ".join(f"{k} {v}" for k, v in sorted(a["refused"].items()) if v)
        lines += ["", f"{a['name']} (malicious, {a['peer_id']}): sent {sum(a['sent'].values())} hostile messages "
                      f"({sent}); groups of it any honest node trained on: {a['used_by_honest']}"
                      + (f"; refused by the transport before reaching anyone: {refused}" if refused else "")]
    (spec.run_dir / "summary.md").write_text("\n".join(lines) + "\n")
    (spec.run_dir / "summary.json").write_text(json.dumps(summary, indent=2))
    meta = json.loads((spec.run_dir / "sim.json").read_text())
    meta["ended_at"] = time.time()
    (spec.run_dir / "sim.json").write_text(json.dumps(meta, indent=2))
    return summary


async def run_worker(n: int, run_dir: Path, seed: int, config: Path | None, overrides: dict) -> int:
    """``sim-worker``: N nodes in this one process over a shared in-memory hub."""
    from node.run.config import load_config
    from node.run.trainer import TrainingNode, identity_path
    from node.transport.memory import MemoryHub, MemoryTransport
    from protocol.identity import load_or_create_identity

    hub = MemoryHub()
    nodes: list[TrainingNode] = []
    loop = asyncio.get_running_loop()
    stopping = False

    def stop_all() -> None:
        nonlocal stopping
        stopping = True
        for node in nodes:
            node.request_stop()

    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop_all)
    try:
        for i in range(n):
            node_overrides = {**overrides, "swarm.transport": "memory", "run.dir": str(run_dir / f"node{i}"),
                              "train.seed": seed + i, "run.progress": "off", "run.plot": False, "train.threads": 1}
            if overrides.get("run.metrics_port"):  # one port per node
                node_overrides["run.metrics_port"] = int(overrides["run.metrics_port"]) + i
            cfg = load_config(config, node_overrides)
            ident = load_or_create_identity(identity_path(cfg))
            t = MemoryTransport(swarm=cfg.swarm.name, publisher=ident.peer_id, hub=hub)
            nodes.append(await TrainingNode.create(cfg, transport=t))
            if stopping:  # a stop that came while this node was being built
                nodes[-1].request_stop()
        results = await asyncio.gather(*(node.run(handle_signals=False) for node in nodes), return_exceptions=True)
    finally:
        for node in nodes:
            await node.close()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.remove_signal_handler(sig)
    errors = [r for r in results if isinstance(r, BaseException)]
    for e in errors:
        log.error("a node failed: %s: %s", type(e).__name__, e)
    if errors:
        return 1
    return 130 if any(r.get("stopped_early") for r in results) else 0
