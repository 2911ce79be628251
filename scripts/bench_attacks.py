"""What attacks do to an honest swarm: the same honest nodes, with and without an attacker.

    python scripts/bench_attacks.py                                   # every scenario, 25 steps
    python scripts/bench_attacks.py --scenarios flood zero_advantage --steps 20
    python scripts/bench_attacks.py --clean-runs 2 --nodes 3 --round-seconds 3 --out docs/results

Each scenario is one ``swarm-node sim`` run (node/sim/runner.py, the code path users run): a bootstrap
peer and ``--nodes`` honest ``swarm-node join`` processes over the real hivemind transport on
127.0.0.1, each with its own p2p daemon, identity and seed (node i: seed + i), the embedded default
model and the default config (8 prompt groups a step, 4 of them from peers, 8 completions of at
most 16 tokens), ``--steps`` steps, ``--round-seconds`` rounds. An attack scenario adds one
``swarm-node adversary`` process (a ``[[malicious]]`` fault) that runs the scenario's attacks
every round (node/sim/adversary/: what each does, and where honest nodes count it). The clean
baseline is the same run without it (``--clean-runs`` times, to show run-to-run noise: rounds are
wall-clock, so two runs of one seed differ).

From every honest node's run folder (metrics.jsonl, status.json, node.log) and, while it runs,
/proc (resident memory of the node process and of its p2p daemon), it takes:

- honest groups received per step: peer groups admitted into the node's pool from the other
  honest nodes (``groups_in_by_peer`` of status.json without the attacker's keys, when the node
  reports it; otherwise ``groups_in`` minus the groups the attacker published in the rounds the
  node polled, a lower bound, marked ``≥``), divided by the steps trained; and the share of the
  groups the other honest nodes published in those rounds that arrived (``delivered``);
- honest groups trained on per step (``external_by_peer`` of each step's record, attacker keys
  left out): at most J = 4, and shared with any attacker batch that is admitted by design;
- steps trained, rounds skipped, NaN steps (a record whose loss, gradient norm, ρ or LR is not
  finite) and updates skipped for a non-finite gradient (node.log);
- ρ (ESS / rows that carry gradient) and the LR factor, mean over the steps; reward (mean total
  reward of the node's own completions);
- peak resident memory (VmHWM of the node's process; and of its p2pd), and its growth over the
  run (VmRSS, last third of the samples vs the middle third);
- rejections by reason, and the transport's counters (``fetch_failures``, ``refused_requests``,
  ``backed_off``), the pool (``dropped_full``, ``pool_bytes``) and ``external_too_long``.

Targets (issue 9): honest groups delivered ≥ 90% of the clean run's share, no NaN step, ρ and
the LR factor unmoved by zero-gradient and foreign-tokenizer rows (within the clean runs' spread,
at least 0.02), resident memory bounded (peak at most the pool's byte cap, 256 MiB, plus 128 MiB
for envelopes being decoded above the clean run's, and levelling off: growing over the run, last
third vs middle third, at most 64 MiB more than a clean node does), every honest node trains every step
at a pace (steps over rounds spanned) at least 90% of the clean run's (not in issue 9's list: an
attack that costs CPU shows there), and each attack counted where it should be (the adversary's DHT writes read back: kept by no replica).

Writes ``attacks[-TAG].json`` and ``attacks[-TAG].md`` into ``--out``; run folders go under
``--runs`` (deleted and rewritten per scenario).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import shutil
import signal
import statistics
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "scripts"))
os.environ.setdefault("HIVEMIND_LOGLEVEL", "WARNING")

from node.sim.adversary import ADMITTED_BY_DESIGN, OVERSIZED_TASKS  # noqa: E402
from node.observe.metrics import read_metrics  # noqa: E402

MIB = 1 << 20
POOL_BYTES_CAP = 256 * MIB  # node.swarm.exchange.MAX_POOL_BYTES: what a node may pool from peers, in all
DECODE_SLACK = 128 * MIB  # envelopes being decoded (a 4 MiB one is ~50 MB of Python objects for a moment)
MAX_GROWTH = 64 * MIB  # growth over the run (last third vs middle third) beyond the clean runs' own
RHO_TOLERANCE = 0.02

# scenario -> (attacks the adversary cycles through, what the honest nodes must show for it)
SCENARIOS: dict[str, tuple[tuple[str, ...], str]] = {
    "displace": (("displace",), "a raw hivemind client writes under honest peers' subkeys with a later "
                                "expiration: every replica refuses (read back: 0 kept)"),
    "far_expiry": (("far_expiry",), "plain values and entries planted hours ahead under round and heartbeat "
                                    "keys (raw client), and signed entries 50 min / 3 h ahead"),
    "flood": (("flood",), "200 fresh keys a round, each a signed index entry whose body does not exist "
                          "or fails its sha256"),
    "honest_address": (("honest_address",), "20 fresh keys a round whose signed entries point at honest "
                                            "nodes' addresses: served nothing (refused_requests); the host says whom it "
                                            "serves, and the other keys' entries are skipped (misdirected)"),
    "logprob_1e300": (("logprob_1e300",), "per-token log-prob -1e300 (-inf in float32): implausible_logprob"),
    "logprob_1e4": (("logprob_1e4",), "per-token log-prob -1e4: implausible_logprob"),
    "foreign_logprob_gap": (("foreign_logprob_gap",), "another tokenizer's fingerprint, Σ log μ claimed "
                                                      "far below Σ log π: admitted, weight capped at 1 + ε_high"),
    "zero_advantage": (("zero_advantage",), "groups of identical completions claimed certain: admitted, "
                                            "no gradient, must not lower ρ"),
    "special_tokens": (("special_tokens",), "a <pad> mid-completion: special_tokens"),
    "oversized": (("oversized",), "4 keys, each a valid batch just under 4 MiB every round (64 x 8 "
                                  "completions of ~600 tokens): larger than all a node could use, "
                                  "not fetched (oversized)"),
    "future_created_at": (("future_created_at",), "created_at an hour ahead (batches and heartbeats): "
                                                  "created_at_mismatch"),
}

# What each attack must leave in the honest nodes' counters (summed over the honest nodes).
EXPECTED_REJECTIONS = {
    "flood": ("hash_mismatch",), "logprob_1e300": ("implausible_logprob",),
    "logprob_1e4": ("implausible_logprob",), "special_tokens": ("special_tokens",),
    "future_created_at": ("created_at_mismatch",), "oversized": ("oversized",),
}
EXPECTED_TRANSPORT = {"honest_address": ("refused_requests",)}
RHO_ATTACKS = ("foreign_logprob_gap", "zero_advantage")  # rows that must not move ρ or the LR
ADVERSARY_NICE = 19  # see _lower_priority
# DHT writes the adversary must find no replica keeping (it reads every write back).
MUST_BE_REFUSED = {"displace": ("displace",),
                   "far_expiry": ("far_expiry:raw_plain", "far_expiry:raw_plain_heartbeat",
                                  "far_expiry:raw_unsigned_entry", "far_expiry:signed_3h")}


@dataclass
class Setup:
    """The honest swarm every scenario runs (and the clean baseline)."""

    nodes: int = 3
    steps: int = 25
    # 3 s: a clean step of three nodes on two cores takes 1.2-2.4 s, so 2 s rounds left no slack and
    # the pace measured the machine's last free cycles rather than what an attack costs.
    round_seconds: float = 3.0
    seed: int = 0
    model: str = "default"
    flags: dict[str, str] = field(default_factory=dict)  # more --section.key flags for every process

    def overrides(self) -> dict[str, str]:
        return {"model.name": self.model, "train.steps": str(self.steps),
                "swarm.round_seconds": str(self.round_seconds), "run.checkpoint_every": "0",
                "run.keep_checkpoints": "1", **self.flags}


# -- resident memory, from /proc --------------------------------------------------------------
def _proc_status(pid: int) -> dict[str, int]:
    out = {}
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith(("VmRSS:", "VmHWM:")):
                out[line.split(":")[0]] = int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return out


def _cpu_seconds(pid: int) -> float:
    """User + system CPU time of a process so far (/proc/PID/stat), 0 when it is gone."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, IndexError, ValueError):
        return 0.0


def _processes() -> list[tuple[int, int, bytes]]:
    """(pid, ppid, cmdline) of every process."""
    out = []
    for d in Path("/proc").iterdir():
        if not d.name.isdigit():
            continue
        try:
            ppid = int((d / "stat").read_text().rsplit(")", 1)[1].split()[1])
            out.append((int(d.name), ppid, (d / "cmdline").read_bytes()))
        except (OSError, IndexError, ValueError):
            continue
    return out


def _family(pid: int, procs: list) -> list[int]:
    """``pid`` and all its descendants (a node's DHT process, and that one's p2p daemon)."""
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        out.append(p)
        todo += [c for c, pp, _ in procs if pp == p]
    return out


def _lower_priority(pid: int, done: set) -> None:
    """The adversary runs at the lowest CPU priority: on one machine, its own work (signing 200
    entries a round, building 4 MiB batches) would otherwise be charged to the defence, where in a
    real swarm it runs on the attacker's hardware. What the attack costs the honest nodes shows in
    their CPU seconds; the adversary's status shows it kept its rate. Every thread: Linux keeps
    a nice value per thread, and the batches are built in worker threads (``done``: the thread
    ids already lowered)."""
    try:
        tids = [int(t) for t in os.listdir(f"/proc/{pid}/task")]
    except OSError:
        return  # gone already
    for tid in tids:
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
        procs = _processes()
        if self.adversary_dir:
            want = b"\0--run.dir\0" + self.adversary_dir.encode() + b"\0"
            for pid, _, cmd in procs:
                if b"node.cli" in cmd and want in cmd + b"\0":
                    for p in _family(pid, procs):
                        _lower_priority(p, self._reniced)
                        self.adversary_cpu[p] = max(self.adversary_cpu.get(p, 0.0), _cpu_seconds(p))
        for i, d in enumerate(self.node_dirs):
            want = b"\0--run.dir\0" + d.encode() + b"\0"
            for pid, _, cmd in procs:
                if b"node.cli" in cmd and want in cmd + b"\0":
                    for p in _family(pid, procs):
                        self.cpu[p] = max(self.cpu.get(p, 0.0), _cpu_seconds(p))
                    st = _proc_status(pid)
                    self.node_peak[i] = max(self.node_peak[i], st.get("VmHWM", 0), st.get("VmRSS", 0))
                    if st.get("VmRSS"):
                        self.series[i].append(st["VmRSS"])
                    for cpid, ppid, ccmd in procs:
                        if ppid == pid and b"p2pd" in ccmd:
                            cst = _proc_status(cpid)
                            self.p2pd_peak[i] = max(self.p2pd_peak[i], cst.get("VmHWM", 0), cst.get("VmRSS", 0))

    async def run(self) -> None:
        while True:
            await asyncio.to_thread(self.sample)
            await asyncio.sleep(1.0)


# -- one scenario -------------------------------------------------------------------------------
def _read_json(path: Path) -> dict:
    try:
        return json.loads(path.read_text())
    except (OSError, json.JSONDecodeError):
        return {}


def _progress_line(run_dir: Path, nodes: int, steps: int, adversary: bool) -> str:
    from node.observe.status import describe_phase

    parts = []
    for i in range(nodes):
        st = _read_json(run_dir / f"node{i}" / "status.json")
        phase = describe_phase(st) if st else "starting"
        parts.append(f"node{i} {st.get('step', 0)}/{steps} {phase.split(' (')[0]}")
    if adversary:
        st = _read_json(run_dir / "adversary0" / "status.json")
        parts.append(f"adversary sent {sum((st.get('sent') or {}).values())}" if st else "adversary starting")
    waiting = "the nodes to load and join" if all(" 0/" in p for p in parts[:nodes]) else \
        f"every node to train {steps} steps"
    return " · ".join(parts) + f" · waiting for {waiting}"


async def run_scenario(name: str, attacks: tuple[str, ...], setup: Setup, run_dir: Path,
                       say: Callable[[str], None] = print, deadline_s: float | None = None) -> dict:
    """Run the honest swarm (plus an adversary running ``attacks``, if any) to the end, then
    measure it. A run past ``deadline_s`` is stopped as Ctrl-C stops a sim (what it did counts)."""
    from node.sim.runner import run_sim
    from node.sim.faults import MaliciousFault, SimFaults
    from node.sim.spec import SimSpec

    if run_dir.exists():
        shutil.rmtree(run_dir)
    faults = SimFaults(malicious=[MaliciousFault(attacks=list(attacks))]) if attacks else SimFaults()
    spec = SimSpec(nodes=setup.nodes, transport="hivemind", run_dir=run_dir, overrides=setup.overrides(),
                   seed=setup.seed, progress="off", faults=faults, build_default_model=setup.model == "default")
    sampler = MemorySampler([run_dir / f"node{i}" for i in range(setup.nodes)],
                            run_dir / "adversary0" if attacks else None)
    deadline_s = deadline_s or 120 + setup.steps * setup.round_seconds * 3
    t0 = time.time()

    deadline_hit = []

    async def watch() -> None:
        while True:
            await asyncio.sleep(10)
            say(f"  {name}: {time.time() - t0:.0f} s · " + _progress_line(run_dir, setup.nodes, setup.steps, bool(attacks)))
            if not deadline_hit and time.time() - t0 > deadline_s:
                say(f"  {name}: past the {deadline_s:.0f} s deadline: stopping the nodes (as Ctrl-C does)")
                deadline_hit.append(True)
                os.kill(os.getpid(), signal.SIGINT)  # run_sim's handler: stop every node, write the summary

    say(f"  {name}: launching a bootstrap peer and {setup.nodes} honest nodes"
        + (f" + an adversary ({', '.join(attacks)})" if attacks else " (no attacker)"))
    tasks = [asyncio.create_task(sampler.run()), asyncio.create_task(watch())]
    try:
        summary = await run_sim(spec)
    finally:
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
    if summary.get("interrupted") and not deadline_hit:  # Ctrl-C: the nodes are stopped; so is the benchmark
        raise KeyboardInterrupt
    wall = time.time() - t0
    result = measure(name, attacks, setup, run_dir, sampler)
    result.update(wall_s=round(wall, 1), stopped_at_deadline=bool(deadline_hit), failed=summary.get("failed", {}))
    return result


def _finite(x) -> bool:
    return isinstance(x, (int, float)) and x == x and x not in (float("inf"), float("-inf"))


def _mean(xs: list) -> float | None:
    xs = [x for x in xs if _finite(x)]
    return statistics.fmean(xs) if xs else None


def measure(name: str, attacks: tuple[str, ...], setup: Setup, run_dir: Path, sampler: MemorySampler) -> dict:
    """What each honest node measured, from its run folder (and the memory samples)."""
    adv = _read_json(run_dir / "adversary0" / "status.json") if attacks else {}
    attacker = set(adv.get("identities") or []) | ({adv["peer_id"]} if adv.get("peer_id") else set())
    by_round = {int(k): v for k, v in (adv.get("groups_by_round") or {}).items()}
    lag = int(setup.flags.get("swarm.max_round_lag", 4))
    recs = [read_metrics(run_dir / f"node{i}" / "metrics.jsonl") for i in range(setup.nodes)]
    statuses = [_read_json(run_dir / f"node{i}" / "status.json") for i in range(setup.nodes)]
    ids = [(st.get("swarm") or {}).get("peer_id") for st in statuses]
    nodes = []
    for i in range(setup.nodes):
        r, st = recs[i], statuses[i]
        sw = st.get("swarm") or {}
        steps = len(r)
        rounds = [x["round"] for x in r if "round" in x]
        lo, hi = (min(rounds) - lag, max(rounds)) if rounds else (0, -1)
        in_by_peer = sw.get("groups_in_by_peer")
        if in_by_peer is not None:
            received, exact = sum(v for p, v in in_by_peer.items() if p in ids and p != ids[i]), True
        else:
            attacker_groups = sum(v for rr, v in by_round.items() if lo <= rr <= hi)
            received, exact = max(0, (sw.get("groups_in") or 0) - attacker_groups), attacker_groups == 0
        # What the other honest nodes published in the rounds this node polled: I groups a step.
        published = 0
        for j in range(setup.nodes):
            if j == i:
                continue
            prev = 0
            for x in recs[j]:
                out = x.get("rollouts_out") or 0
                if lo <= x.get("round", -1) <= hi and out > prev:
                    published += local_groups(setup)
                prev = out
        used_honest = sum(v for x in r for p, v in (x.get("external_by_peer") or {}).items() if p not in attacker)
        used_attacker = sum(v for x in r for p, v in (x.get("external_by_peer") or {}).items() if p in attacker)
        learner = [x for x in r if "loss" in x or "rho" in x]
        nan_steps = sum(1 for x in learner if not all(_finite(x.get(k)) for k in ("loss", "grad_norm", "rho", "lr")))
        log_text = (run_dir / f"node{i}" / "node.log").read_text(errors="replace") \
            if (run_dir / f"node{i}" / "node.log").exists() else ""
        last = r[-1] if r else {}
        nodes.append({
            "node": f"node{i}", "peer_id": ids[i], "steps": steps, "rounds_skipped": last.get("rounds_skipped"),
            "pace": steps / (steps + (last.get("rounds_skipped") or 0)) if steps else None,
            "groups_in": sw.get("groups_in") or 0,
            "honest_received": received, "honest_received_exact": exact,
            "honest_received_per_step": received / steps if steps else None,
            "honest_published": published, "delivered": received / published if published else None,
            "honest_used_per_step": used_honest / steps if steps else None,
            "attacker_used": used_attacker,
            "rho_mean": _mean([x.get("rho") for x in learner]),
            "rho_min": min((x["rho"] for x in learner if _finite(x.get("rho"))), default=None),
            "lr_factor_mean": _mean([x.get("lr_factor") for x in learner]),
            "reward_mean": _mean([x.get("reward") for x in r]),
            "nan_steps": nan_steps, "skipped_updates": log_text.count("non-finite gradient norm"),
            "max_rss_mb": sampler.node_peak[i] / MIB, "p2pd_max_rss_mb": sampler.p2pd_peak[i] / MIB,
            "rss_growth_mb": None if sampler.growth(i) is None else sampler.growth(i) / MIB,
            "rejected": sw.get("rejected") or {},
            "fetch_failures": sw.get("fetch_failures", 0), "refused_requests": sw.get("refused_requests", 0),
            "misdirected": sw.get("misdirected", 0),
            "backed_off": sw.get("backed_off", 0), "dropped_full": sw.get("dropped_full", 0),
            "pool_bytes": sw.get("pool_bytes", 0), "poll_errors": sw.get("poll_errors", 0),
            "internal_errors": sw.get("internal_errors", 0),
            "external_too_long": sum(x.get("external_too_long") or 0 for x in r),
            "phase": st.get("phase"),
        })
    rejected: dict[str, int] = {}
    for n in nodes:
        for k, v in n["rejected"].items():
            rejected[k] = rejected.get(k, 0) + v
    agg = {k: _mean([n[k] for n in nodes]) for k in (
        "honest_received_per_step", "delivered", "honest_used_per_step", "rho_mean", "lr_factor_mean",
        "reward_mean", "pace")}
    served = (adv.get("served") or 0) if "oversized" in attacks else 0
    if served and not all(n["honest_received_exact"] for n in nodes):
        # The oversized senders' bodies are served by the adversary alone: however the honest nodes
        # shared them out, they admitted at most 64 groups per body served, a tighter bound than
        # everything published.
        total_in, total_steps = sum(n["groups_in"] for n in nodes), sum(n["steps"] for n in nodes)
        total_pub = sum(n["honest_published"] for n in nodes)
        bound = max(0, total_in - served * OVERSIZED_TASKS)
        if total_steps and (agg["honest_received_per_step"] or 0) < bound / total_steps:
            agg["honest_received_per_step"] = bound / total_steps
            agg["delivered"] = bound / total_pub if total_pub else None
            agg["received_bound"] = f"groups_in - 64 x {served} bodies served by the adversary"
    agg.update(
        rho_min=min((n["rho_min"] for n in nodes if n["rho_min"] is not None), default=None),
        steps=[n["steps"] for n in nodes], rounds_skipped=[n["rounds_skipped"] for n in nodes],
        nan_steps=sum(n["nan_steps"] for n in nodes), skipped_updates=sum(n["skipped_updates"] for n in nodes),
        max_rss_mb=max(n["max_rss_mb"] for n in nodes), p2pd_max_rss_mb=max(n["p2pd_max_rss_mb"] for n in nodes),
        rss_growth_mb=max((n["rss_growth_mb"] for n in nodes if n["rss_growth_mb"] is not None), default=None),
        received_exact=all(n["honest_received_exact"] for n in nodes), rejected=rejected,
        **{k: sum(n[k] for n in nodes) for k in ("fetch_failures", "refused_requests", "misdirected", "backed_off",
                                                  "dropped_full",
                                                  "attacker_used", "external_too_long", "poll_errors",
                                                  "internal_errors")},
        max_pool_bytes=max(n["pool_bytes"] for n in nodes),
        honest_cpu_s=sum(sampler.cpu.values()), adversary_cpu_s=sum(sampler.adversary_cpu.values()))
    adversary = {k: adv.get(k) for k in ("peer_id", "sent", "refused", "stores", "fresh_keys", "served")} if attacks else None
    return {"scenario": name, "attacks": list(attacks), "nodes": nodes, "honest": agg, "adversary": adversary}


def local_groups(setup: Setup) -> int:
    """I: the groups an honest node generates (and publishes) a step in this setup."""
    from node.run.config import NodeConfig

    d = NodeConfig()
    b = int(setup.flags.get("generation.prompts_per_step", d.generation.prompts_per_step))
    return b - int(setup.flags.get("swarm.external_groups", d.swarm.external_groups))


# -- comparison against the clean runs -----------------------------------------------------------
def clean_baseline(cleans: list[dict]) -> dict:
    """Mean of the clean runs, and their spread (the run-to-run noise)."""
    for c in cleans:  # runs measured before pace was recorded
        h = c["honest"]
        h.setdefault("pace", _mean([s / (s + (k or 0)) for s, k in zip(h["steps"], h["rounds_skipped"]) if s]))
    keys = ("honest_received_per_step", "delivered", "honest_used_per_step", "rho_mean", "lr_factor_mean",
            "reward_mean", "max_rss_mb", "pace", "honest_cpu_s")
    base = {k: _mean([c["honest"].get(k) for c in cleans]) for k in keys}
    base["spread"] = {k: (max(c["honest"][k] for c in cleans) - min(c["honest"][k] for c in cleans))
                      if all(_finite(c["honest"].get(k)) for c in cleans) else None for k in keys}
    base["max_rss_mb"] = max(c["honest"]["max_rss_mb"] for c in cleans)
    growths = [c["honest"].get("rss_growth_mb") for c in cleans if c["honest"].get("rss_growth_mb") is not None]
    base["rss_growth_mb"] = max(growths) if growths else None
    base["runs"] = len(cleans)
    return base


def verdict(result: dict, base: dict, setup: Setup) -> dict:
    """Each target, met or not (None: not measurable here), with the numbers behind it."""
    h = result["honest"]
    out: dict[str, dict] = {}
    # Delivery: the share of the other honest nodes' published groups that arrived, against the
    # clean run's (a ratio of shares: which node joined first, or how many rounds a run spans,
    # does not move it); the per-step ratio is reported with it.
    ratio = (h["delivered"] / base["delivered"] if h["delivered"] is not None and base["delivered"] else None)
    per_step = (h["honest_received_per_step"] / base["honest_received_per_step"]
                if h["honest_received_per_step"] is not None and base["honest_received_per_step"] else None)
    ok = None if ratio is None else ratio >= 0.9
    if ok is False and not h["received_exact"]:
        ok = None  # a lower bound under 90% says nothing
    out["honest_received_90pct"] = {"ok": ok, "ratio": ratio, "per_step_ratio": per_step,
                                    "exact": h["received_exact"]}
    out["every_step"] = {"ok": all(s == setup.steps for s in h["steps"]), "steps": h["steps"]}
    pace = h.get("pace")
    if pace is None and h["steps"]:  # a run measured before pace was recorded
        pace = _mean([s / (s + (k or 0)) for s, k in zip(h["steps"], h["rounds_skipped"]) if s])
    base_pace = base.get("pace")
    out["pace_90pct"] = {"ok": None if not (pace and base_pace) else pace / base_pace >= 0.9,
                         "pace": pace, "clean_pace": base_pace}
    out["no_nan"] = {"ok": h["nan_steps"] == 0 and h["skipped_updates"] == 0,
                     "nan_steps": h["nan_steps"], "skipped_updates": h["skipped_updates"]}
    growth, clean_growth = h.get("rss_growth_mb"), base.get("rss_growth_mb") or 0.0
    out["memory_bounded"] = {"ok": (0 < h["max_rss_mb"] <= base["max_rss_mb"] + (POOL_BYTES_CAP + DECODE_SLACK) / MIB
                                    and (growth is None or growth <= clean_growth + MAX_GROWTH / MIB)),
                             "max_rss_mb": h["max_rss_mb"], "clean_max_rss_mb": base["max_rss_mb"],
                             "growth_mb": growth, "clean_growth_mb": clean_growth}
    attacks = result.get("attacks") or []
    if set(attacks) & set(RHO_ATTACKS):
        tol = max(RHO_TOLERANCE, base["spread"]["rho_mean"] or 0.0)
        tol_lr = max(RHO_TOLERANCE, base["spread"]["lr_factor_mean"] or 0.0)
        measured = None not in (h["rho_mean"], h["lr_factor_mean"], base["rho_mean"], base["lr_factor_mean"])
        out["rho_unmoved"] = {"ok": measured and (h["rho_mean"] >= base["rho_mean"] - tol
                                                  and h["lr_factor_mean"] >= base["lr_factor_mean"] - tol_lr),
                              "rho": h["rho_mean"], "clean_rho": base["rho_mean"], "tolerance": tol,
                              "lr_factor": h["lr_factor_mean"], "clean_lr_factor": base["lr_factor_mean"]}
    for reason in dict.fromkeys(r for a in attacks for r in EXPECTED_REJECTIONS.get(a, ())):
        out[f"rejected:{reason}"] = {"ok": h["rejected"].get(reason, 0) > 0, "count": h["rejected"].get(reason, 0)}
    for counter in dict.fromkeys(c for a in attacks for c in EXPECTED_TRANSPORT.get(a, ())):
        out[counter] = {"ok": h[counter] > 0, "count": h[counter]}
    stores = (result.get("adversary") or {}).get("stores") or {}
    for kind in (k for a in attacks for k in MUST_BE_REFUSED.get(a, ())):
        s = stores.get(kind) or {}
        out[f"refused:{kind}"] = {"ok": bool(s) and s.get("kept", 0) == 0 and s.get("refused", 0) > 0, **s}
    if attacks and not set(attacks) & set(ADMITTED_BY_DESIGN):
        out["attacker_never_trained_on"] = {"ok": h["attacker_used"] == 0, "groups": h["attacker_used"]}
    return out


# -- the report -----------------------------------------------------------------------------------
def _f(x, spec: str = ".2f", none: str = "n/a") -> str:
    return none if x is None else format(x, spec)


def _steps(h: dict) -> str:
    skipped = "/".join("?" if x is None else str(x) for x in h["rounds_skipped"])
    pace = h.get("pace") or _mean([s / (s + (k or 0)) for s, k in zip(h["steps"], h["rounds_skipped"]) if s])
    return f"{'/'.join(map(str, h['steps']))} (skipped {skipped}; pace {_f(pace, '.0%')})"


def _reasons(d: dict) -> str:
    return ", ".join(f"{k} {v}" for k, v in sorted(d.items()) if v) or "-"


def markdown(result: dict) -> list[str]:
    base, setup = result["clean"], result["setup"]
    setup = {**setup, "j": int(setup["flags"].get("swarm.external_groups", 4))}
    md = ["# Attacks against an honest swarm, with and without the attacker", "",
          f"`{result['command']}`", "",
          f"Each row is one `swarm-node sim` run over the real hivemind transport on 127.0.0.1: a bootstrap "
          f"peer, {setup['nodes']} honest `swarm-node join` processes (embedded default model "
          f"`{setup['model']}`, default config: 8 groups a step, 4 from peers, G = 8, 16 tokens; "
          f"{setup['steps']} steps, {setup['round_seconds']:g} s rounds, seed {setup['seed']} + i) and, but "
          f"for `clean`, one `swarm-node adversary` process running the attack every round "
          f"(node/sim/adversary/). Numbers are what the honest nodes measured: means over the "
          f"{setup['nodes']} nodes (RSS: the largest). *clean* in a cell is the mean of the "
          f"{base['runs']} clean runs (rows `clean-1`...; their spread is the run-to-run noise: rounds "
          f"are wall-clock). `≥` marks a lower bound (see below).", "",
          f"| scenario | honest groups received / step: clean → attack (ratio); share delivered (ratio) | "
          f"trained on / step (of J = {setup['j']}) | "
          "steps (rounds skipped; pace) | ρ: clean → attack | LR factor | reward: clean → attack | "
          "max RSS MB: clean → attack (p2pd; growth) | "
          "NaN steps | rejected by reason (all honest nodes) | targets |",
          "|---|---|---|---|---|---|---|---|---|---|---|"]
    for c in result["clean_runs"]:
        h = c["honest"]
        md.append(f"| {c['scenario']} | {_f(h['honest_received_per_step'])} (delivered {_f(h['delivered'], '.0%')}) | "
                  f"{_f(h['honest_used_per_step'])} | {_steps(h)} | {_f(h['rho_mean'], '.3f')} | "
                  f"{_f(h['lr_factor_mean'], '.3f')} | {_f(h['reward_mean'], '.3f')} | "
                  f"{_f(h['max_rss_mb'], '.0f')} ({_f(h['p2pd_max_rss_mb'], '.0f')}; {_f(h.get('rss_growth_mb'), '+.0f')}) | "
                  f"{h['nan_steps']} | "
                  f"{_reasons(h['rejected'])} | - |")
    for s in result["scenarios"]:
        h, v = s["honest"], s["verdict"]
        ratio, per_step = v["honest_received_90pct"]["ratio"], v["honest_received_90pct"]["per_step_ratio"]
        bound = "" if h["received_exact"] else "≥ "
        met = [k for k, x in v.items() if x["ok"]]
        missed = [k for k, x in v.items() if x["ok"] is False]
        unknown = [k for k, x in v.items() if x["ok"] is None]
        targets = "all met" if not missed and not unknown else "; ".join(
            p for p in (f"MISSED {', '.join(missed)}" if missed else "",
                        f"not measurable: {', '.join(unknown)}" if unknown else "") if p)
        md.append(
            f"| {s['scenario']} | {_f(base['honest_received_per_step'])} → {bound}{_f(h['honest_received_per_step'])} "
            f"({bound}{_f(per_step)}); delivered {_f(base['delivered'], '.0%')} → {bound}{_f(h['delivered'], '.0%')} "
            f"({bound}{_f(ratio)}) | {_f(base['honest_used_per_step'])} → {_f(h['honest_used_per_step'])} | "
            f"{_steps(h)} | {_f(base['rho_mean'], '.3f')} → {_f(h['rho_mean'], '.3f')} | "
            f"{_f(base['lr_factor_mean'], '.3f')} → {_f(h['lr_factor_mean'], '.3f')} | "
            f"{_f(base['reward_mean'], '.3f')} → {_f(h['reward_mean'], '.3f')} | "
            f"{_f(base['max_rss_mb'], '.0f')} → {_f(h['max_rss_mb'], '.0f')} ({_f(h['p2pd_max_rss_mb'], '.0f')}; "
            f"{_f(h.get('rss_growth_mb'), '+.0f')}) | "
            f"{h['nan_steps']} | {_reasons(h['rejected'])} | {targets} ({len(met)}/{len(v)} met) |")
    md += ["", "What each attack is, and the other counters (summed over the honest nodes; the adversary's "
               "own status for what it sent and which of its DHT writes a replica kept):", "",
           "| scenario | attack | fetch failures | refused requests (misdirected entries skipped) | backed off | dropped full | pool MB at the last step | "
           "too long to train | attacker groups trained on | CPU s: honest nodes (clean) / adversary | "
           "adversary: sent; DHT writes kept/refused |",
           "|---|---|---|---|---|---|---|---|---|---|---|"]
    for s in result["scenarios"]:
        h, a = s["honest"], s["adversary"] or {}
        stores = "; ".join(f"{k} {x.get('kept', 0)}/{x.get('refused', 0)}" for k, x in sorted((a.get("stores") or {}).items()))
        sent = sum((a.get("sent") or {}).values())
        md.append(f"| {s['scenario']} | {SCENARIOS[s['scenario']][1]} | {h['fetch_failures']} | "
                  f"{h['refused_requests']} ({h.get('misdirected', 0)}) | "
                  f"{h['backed_off']} | {h['dropped_full']} | {h['max_pool_bytes'] / MIB:.0f} | {h['external_too_long']} | "
                  f"{h['attacker_used']} | {_f(h.get('honest_cpu_s'), '.0f')} ({_f(base.get('honest_cpu_s'), '.0f')}) / "
                  f"{_f(h.get('adversary_cpu_s'), '.0f')} | sent {sent}{f'; {stores}' if stores else ''} |")
    md += ["", "Targets: honest groups delivered ≥ 90% of clean (`honest_received_90pct`: the share "
               "delivered, as a ratio to the clean runs' share), every honest node "
               "trains every step (`every_step`) and keeps up with the rounds as in clean (`pace_90pct`: steps over "
               "rounds spanned, at least 90% of clean's; not one of issue 9's targets, added because an attack "
               "that costs CPU shows there), no NaN step and no update skipped for a non-finite gradient "
               "(`no_nan`), resident memory bounded (`memory_bounded`: peak RSS at most the pool's 256 MiB cap "
               "+ 128 MiB for envelopes being decoded above clean's, and growing over the run at most 64 MiB "
               "more than the clean runs' nodes do: it levels off as theirs does), ρ and the "
               f"LR factor within max({RHO_TOLERANCE}, the clean runs' spread) of clean for the rows that carry no "
               "gradient or a capped weight (`rho_unmoved`), the attack counted under its reason "
               "(`rejected:…`, `refused_requests`, `fetch_failures`), no replica keeping a write it must refuse "
               "(`refused:…`: the adversary reads every write back), and nothing of a rejected attack ever "
               "trained on (`attacker_never_trained_on`).", "",
           "*received*: peer groups admitted into the node's pool from the other honest nodes, per step "
           "trained. It comes from `groups_in_by_peer` in status.json when the node reports it; otherwise "
           "from `groups_in` (every sender) minus the groups the adversary published in the rounds the node "
           "polled: exact when the attack's envelopes are all refused, a lower bound (`≥`) when they are "
           "admitted by design. *delivered*: that count over the groups the other honest nodes published in "
           "the rounds the node polled (from its first step's round minus max_round_lag; it polls from its "
           "join a little earlier, so a share can pass 100%). *trained on*: honest peers' groups in the learner's batch (at most J a step); "
           "a batch admitted by design takes its sender's turn in the round-robin, so it shares J with the "
           "honest peers. *max RSS*: peak resident memory (VmHWM, sampled every second) of the node process, "
           "and of its p2p daemon; *growth*: the node's VmRSS, highest in the last third of the samples minus "
           "highest in the middle third (largest over the nodes). *CPU s*: CPU time the three honest node "
           "processes and their DHT processes and p2p daemons used over the run, and the adversary's (with its "
           "own): on this one machine they share the cores, so the adversary runs at nice 19 (its work would "
           "otherwise slow the honest nodes, where in a swarm it runs on the attacker's hardware); what an attack "
           "costs the defence is the honest CPU over clean's, and *sent* / the DHT writes show the attack kept "
           "its rate.",
           "", f"{result['machine']}, Python {result['python']}, torch {result['torch']}; load average at the "
               f"end {_f(result['load_avg_1m'])}; {result['wall_s'] / 60:.1f} min in all."]
    return md


# -- main -----------------------------------------------------------------------------------------
async def run_all(names: list[str], setup: Setup, runs: Path, clean_runs: int,
                  say: Callable[[str], None] = print) -> dict:
    plan = [f"clean-{k + 1}" for k in range(clean_runs)] + names
    cleans, scenarios = [], []
    for n, name in enumerate(plan, 1):
        say(f"[{n}/{len(plan)}] {name}")
        attacks = () if name.startswith("clean") else SCENARIOS[name][0]
        res = await run_scenario(name, attacks, setup, runs / name, say)
        (cleans if not attacks else scenarios).append(res)
        h = res["honest"]
        say(f"  {name}: done in {res['wall_s']:.0f} s: steps {h['steps']}, honest received/step "
            f"{_f(h['honest_received_per_step'])}, ρ {_f(h['rho_mean'], '.3f')}, max RSS {h['max_rss_mb']:.0f} MB, "
            f"rejected {_reasons(h['rejected'])}")
        (runs / "partial.json").write_text(json.dumps({"clean_runs": cleans, "scenarios": scenarios}, indent=2))
    base = clean_baseline(cleans)
    for s in scenarios:
        s["verdict"] = verdict(s, base, setup)
    return {"clean_runs": cleans, "clean": base, "scenarios": scenarios}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--scenarios", nargs="+", default=list(SCENARIOS), choices=list(SCENARIOS), metavar="NAME",
                    help=f"attack scenarios (default: all): {', '.join(SCENARIOS)}")
    ap.add_argument("--steps", type=int, default=25, help="steps each honest node trains")
    ap.add_argument("--nodes", type=int, default=3, help="honest nodes")
    ap.add_argument("--round-seconds", type=float, default=Setup.round_seconds)
    ap.add_argument("--clean-runs", type=int, default=2, help="runs without the attacker (the baseline; 2 show the noise)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--model", default="default", help="model for every node (default: the embedded default)")
    ap.add_argument("--runs", type=Path, default=ROOT / "runs" / "bench_attacks", help="run folders (rewritten)")
    ap.add_argument("--out", type=Path, default=ROOT / "docs" / "results")
    ap.add_argument("--tag", default="", help="suffix of the output file names")
    ap.add_argument("--rerender", action="store_true",
                    help="run nothing: judge the targets again and rewrite the report from --out's attacks[-TAG].json")
    args = ap.parse_args()
    stem = "attacks" + (f"-{args.tag}" if args.tag else "")
    if args.rerender:
        return rerender(args.out / f"{stem}.json")
    if args.clean_runs < 1:
        ap.error("--clean-runs must be at least 1: the attacks are measured against it")
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    from bench_common import environment

    setup = Setup(nodes=args.nodes, steps=args.steps, round_seconds=args.round_seconds, seed=args.seed,
                  model=args.model)
    t0 = time.time()
    try:
        result = asyncio.run(run_all(args.scenarios, setup, args.runs, args.clean_runs, lambda s: print(s, flush=True)))
    except KeyboardInterrupt:
        print(f"interrupted: nothing written to {args.out}; what finished is in {args.runs / 'partial.json'}",
              file=sys.stderr)
        return 130
    result.update(benchmark="attacks against an honest swarm over hivemind, with and without the attacker",
                  command=" ".join(["python scripts/bench_attacks.py", *sys.argv[1:]]),
                  setup={"nodes": setup.nodes, "steps": setup.steps, "round_seconds": setup.round_seconds,
                         "seed": setup.seed, "model": setup.model, "flags": setup.flags},
                  wall_s=time.time() - t0, **environment())
    write(args.out / f"{stem}.json", result)
    return 0


def write(path: Path, result: dict) -> None:
    """``path`` (JSON) and the markdown report next to it; prints the report."""
    md = markdown(result)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(result, indent=2) + "\n")
    path.with_suffix(".md").write_text("\n".join(md) + "\n")
    print("\n".join(md))
    missed = [s["scenario"] for s in result["scenarios"] if any(x["ok"] is False for x in s["verdict"].values())]
    if missed:
        print(f"\ntargets missed in: {', '.join(missed)}", flush=True)


def rerender(path: Path) -> int:
    """The targets judged again (this script's current rules) on a run's measurements."""
    result = json.loads(path.read_text())
    s = result["setup"]
    setup = Setup(nodes=s["nodes"], steps=s["steps"], round_seconds=s["round_seconds"], seed=s["seed"],
                  model=s["model"], flags=s.get("flags") or {})
    result["clean"] = clean_baseline(result["clean_runs"])
    for sc in result["scenarios"]:
        sc["verdict"] = verdict(sc, result["clean"], setup)
    write(path, result)
    return 0


if __name__ == "__main__":
    sys.exit(main())
