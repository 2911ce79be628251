"""The soak's verdicts, from its samples, the sim's fault timeline (faults.jsonl) and the run
folder: each process's memory, descriptors and threads after its warm-up; the run folder against
its configured bounds; every kill resumed from a checkpoint that verifies, with each node's
metrics continuous; honest delivery in each attack phase against the clean phases beside it;
tracebacks in any log; the workers' lag behind their learner. The arithmetic is maths.py's."""

from __future__ import annotations

import json
import re
from pathlib import Path

from soak_suite.maths import counter_increase, ends, growth, slope, step_gaps, undisturbed_rate
from soak_suite.schedule import Schedule

MB = 1e6
MAX_RSS_GROWTH = 0.10
MAX_FLAT_CHANGE = 0.10  # fds and threads
MIN_DELIVERY = 0.90
CATCH_UP_S = 60.0  # a restarted worker (or one whose learner restarted) may take this long to be within S again
MIN_WINDOW_SAMPLES = 6  # a process judged on fewer samples after its warm-up is reported, not judged
RESUMED = re.compile(r"resumed from \S+ \(step (\d+)|no checkpoint in \S+ yet: starting from step (0)")


def process_series(samples: list[dict]) -> dict[tuple[str, int], list[dict]]:
    """Each process's readings in order, keyed by (name, pid): a restarted node is a new process."""
    out: dict[tuple[str, int], list[dict]] = {}
    for s in samples:
        for name, r in s["procs"].items():
            out.setdefault((name, r["pid"]), []).append({"t": s["t"], **r})
    return out


def judge_processes(samples: list[dict], t0: float, warm_up: float) -> list[dict]:
    """Each node's and the bootstrap peer's process (and its p2p daemons), over its window: from
    the later of the run's warm-up end and its own start plus a warm-up, to its last sample."""
    rows = []
    for (name, pid), rs in process_series(samples).items():
        if name.startswith("adversary"):
            continue  # the attacker's own memory is not the swarm's
        start = max(t0 + warm_up, rs[0]["t"] + warm_up)
        w = [r for r in rs if r["t"] >= start and r["rss"]]
        row = {"name": name, "pid": pid, "lived_s": round(rs[-1]["t"] - rs[0]["t"]), "samples": len(w),
               "judged": len(w) >= MIN_WINDOW_SAMPLES}
        if w:
            ts = [r["t"] for r in w]
            for key, label in (("rss", "rss"), ("p2pd_rss", "p2pd_rss")):
                ys = [r[key] / MB for r in w]
                e = ends(ys)
                sl = slope(ts, ys)
                row.update({f"{label}_start_mb": round(e[0], 1), f"{label}_end_mb": round(e[1], 1),
                            f"{label}_growth": growth(ys), f"{label}_slope_mb_h": None if sl is None else sl * 3600})
            for key in ("fds", "threads", "p2pd_fds"):
                ys = [r[key] for r in w if r[key] is not None]
                e = ends(ys)
                row.update({f"{key}_start": e and round(e[0], 1), f"{key}_end": e and round(e[1], 1),
                            f"{key}_growth": growth(ys)})
        rows.append(row)
    return rows


def judge_disk(samples: list[dict], run_dir: Path, nodes: int, keep: int) -> dict:
    """The run folder at every sample against its bounds: complete checkpoints at most
    ``keep`` + 1 (the newest is written before the oldest is pruned), their bytes within that
    many of the largest checkpoint on disk at the end (1% over); weight chunks within two versions of the model (the
    store keeps the applied version and the one being fetched); logs and metrics have no
    configured bound, so their growth per hour is reported."""
    ckpt_size, model_size = 0, 0
    for i in range(nodes):
        for c in (run_dir / f"node{i}" / "checkpoints").glob("step_*"):
            files = [f for f in c.iterdir() if f.is_file()]
            ckpt_size = max(ckpt_size, sum(f.stat().st_size for f in files))
            model_size = max(model_size, sum(f.stat().st_size for f in files if f.name.startswith("model")))
    # 1% over: a checkpoint's state.json (step, time, versions) differs by a few bytes from one to the next
    ckpt_bound = int((keep + 1) * ckpt_size * 1.01)
    chunk_bound = 2 * model_size + (1 << 20)  # plus one chunk in flight (1 MiB is above any chunk)
    per_node, worst = {}, {"checkpoints": 0, "chunks": 0, "n_checkpoints": 0}
    for i in range(nodes):
        n = f"node{i}"
        xs = [s["disk"][n] for s in samples if n in s["disk"]]
        if not xs:
            continue
        hours = (samples[-1]["t"] - samples[0]["t"]) / 3600 or None
        worst_at = max(xs, key=lambda x: x["checkpoints"])
        per_node[n] = {"max": {k: max(x[k] for x in xs) for k in xs[0] if k != "checkpoint_dirs"}, "end": xs[-1],
                       "checkpoint_dirs_at_max": worst_at.get("checkpoint_dirs"),
                       **{f"{k}_mb_per_hour": (xs[-1][k] - xs[0][k]) / MB / hours if hours else None
                          for k in ("logs", "metrics", "other")}}
        for k in worst:
            worst[k] = max(worst[k], per_node[n]["max"][k])
    return {"nodes": per_node, "checkpoint_bytes": ckpt_size, "model_bytes": model_size,
            "bound_checkpoints_bytes": ckpt_bound, "bound_n_checkpoints": keep + 1, "bound_chunks_bytes": chunk_bound,
            "max_checkpoints_bytes": worst["checkpoints"], "max_n_checkpoints": worst["n_checkpoints"],
            "max_chunks_bytes": worst["chunks"],
            "checkpoints_within": worst["checkpoints"] <= ckpt_bound and worst["n_checkpoints"] <= keep + 1,
            "chunks_within": worst["chunks"] <= chunk_bound,
            "logs_mb_per_hour": sum(v["logs_mb_per_hour"] or 0 for v in per_node.values()),
            "metrics_mb_per_hour": sum(v["metrics_mb_per_hour"] or 0 for v in per_node.values())}


def judge_resumes(events: list[dict], run_dir: Path, nodes: int) -> dict:
    """Each kill against the restart's own log line (the step it resumed from), each node's
    metrics.jsonl for steps lost or recorded twice, and every checkpoint left verified."""
    from swarm_node.node.errors import CheckpointError
    from swarm_node.node.observe.metrics import read_metrics
    from swarm_node.node.checkpoint.checkpoint import list_checkpoints
    from swarm_node.node.checkpoint.checkpoint_format import verify_cached

    resumes = []
    for i in range(nodes):
        log = run_dir / f"node{i}" / "node.log"
        text = log.read_text(errors="replace") if log.exists() else ""
        found = [int(a or b) for a, b in RESUMED.findall(text)]
        kills = [e for e in events if e["what"] == "kill" and e["node"] == i]
        for k, e in enumerate(kills):
            got = found[k] if k < len(found) else None
            resumes.append({"node": i, "at": e["at"], "step": e["step"], "checkpoint": e["checkpoint"],
                            "resumed_from": got, "redone_steps": e["step"] - (got or 0),
                            "ok": e["checkpoint"] is not None and got == e["checkpoint"]})
    continuity = {f"node{i}": step_gaps([int(r["step"]) for r in read_metrics(run_dir / f"node{i}" / "metrics.jsonl")
                                         if "step" in r]) for i in range(nodes)}
    checked, failing = 0, []
    for i in range(nodes):
        for c in list_checkpoints(run_dir / f"node{i}" / "checkpoints"):
            checked += 1
            try:
                verify_cached(c)
            except (CheckpointError, OSError) as e:
                failing.append(f"node{i}/{c.name}: {e}")
    return {"resumes": resumes, "continuity": continuity, "checkpoints_checked": checked,
            "checkpoints_failing": failing}


def judge_delivery(samples: list[dict], sched: Schedule, t0: float, nodes: int, adversaries: list[dict]) -> dict:
    """Honest groups admitted per node per minute in each phase (counted over the intervals
    between samples that lie in the phase and miss the partition and the outage), and each
    attack phase against the clean phases before and after it."""
    per_node = {f"node{i}": [] for i in range(nodes)}
    points = []
    for s in samples:
        for n in per_node:
            per_node[n].append((s["nodes"].get(n) or {}).get("honest_in"))
        points.append((s["t"], sum(counter_increase(v) for v in per_node.values()) / nodes))
    disturbed = [(t0 + a, t0 + b) for a, b in sched.disturbed()]
    phases = []
    for p in sched.phases:
        rate, minutes = undisturbed_rate(points, t0 + p.start, t0 + p.end, disturbed)
        phases.append({"name": p.name, "start_s": p.start, "end_s": p.end, "attacks": list(p.attacks),
                       "rate": rate, "minutes": round(minutes, 2)})
    j = 0
    for k, p in enumerate(phases):
        if not p["attacks"]:
            continue
        clean = [q for q in (phases[k - 1], phases[k + 1] if k + 1 < len(phases) else None)
                 if q is not None and q["rate"] is not None]
        # weighted by the minutes each was measured over: a clean phase the outage cut to one
        # interval counts for that much
        span = sum(q["minutes"] for q in clean)
        base = sum(q["rate"] * q["minutes"] for q in clean) / span if span else None
        p["clean_rate"] = base
        p["ratio"] = p["rate"] / base if p["rate"] is not None and base else None
        adv = adversaries[j] if j < len(adversaries) else {}
        p["sent"] = sum((adv.get("sent") or {}).values())
        j += 1
    return {"phases": phases, "unit": "honest groups admitted per node per minute"}


def judge_logs(run_dir: Path) -> dict:
    """Every log in the sim folder with a Python traceback in it, and how many."""
    out = {}
    for log in sorted(run_dir.rglob("*.log")):
        n = log.read_text(errors="replace").count("Traceback (most recent call last)")
        if n:
            out[str(log.relative_to(run_dir))] = n
    return out


def judge_lag(samples: list[dict], t0: float, warm_up: float, events: list[dict]) -> dict:
    """Each worker's lag at every sample after the warm-up: the learner's published version less
    the worker's applied one, in versions (not the worker's own ``lag``, which counts only the
    versions it has heard of: a restarted worker that has heard of none reads 0). After its own
    restart or its learner's, a worker may take ``CATCH_UP_S`` to be within ``max_staleness``
    again: those samples are left out, and each catch-up's length reported."""
    restarts = [(e["at"], f"node{e['node']}") for e in events if e["what"] == "restart"]
    # roles as any sample showed them (a restarted node's status has none until it is up again)
    roles = {n: st["role"] for x in samples for n, st in x["nodes"].items() if st.get("role")}
    workers = {n for n, r in roles.items() if r == "worker"}
    learners = {n for n, r in roles.items() if r == "learner"}
    out: dict[str, dict] = {}
    behind_since: dict[str, float] = {}
    done: set = set()
    for s in samples:
        learner = next((s["nodes"][n] for n in learners if n in s["nodes"]), {})
        for at, who in restarts:
            if s["t"] >= at and (at, who) not in done:
                done.add((at, who))
                for n in workers:
                    if n == who or who in learners:
                        behind_since.setdefault(n, at)
        if s["t"] < t0 + warm_up or learner.get("published_version") is None:
            continue
        for n, st in s["nodes"].items():
            if n not in workers or st.get("applied_version") is None:
                continue
            lag = learner["published_version"] - st["applied_version"]
            bound = st.get("max_staleness") or 0
            w = out.setdefault(n, {"samples": 0, "within": 0, "max": 0, "max_staleness": bound, "catch_ups_s": []})
            if n in behind_since:
                took = s["t"] - behind_since[n]
                if lag > bound and took <= CATCH_UP_S:
                    continue
                w["catch_ups_s"].append(round(took, 1))
                del behind_since[n]
            w["samples"] += 1
            w["within"] += lag <= bound
            w["max"] = max(w["max"], lag)
    for n, since in behind_since.items():  # a catch-up the run's end cut short
        if n in out and samples:
            out[n]["behind_at_end_s"] = round(samples[-1]["t"] - since, 1)
    return out


def read_adversaries(run_dir: Path, count: int) -> list[dict]:
    out = []
    for j in range(count):
        try:
            out.append(json.loads((run_dir / f"adversary{j}" / "status.json").read_text()))
        except (OSError, ValueError):
            out.append({})
    return out
