"""What each honest node of a scenario measured, from its run folder (metrics.jsonl, status.json,
node.log) and the samples taken while it ran, and those numbers over the honest nodes."""

from __future__ import annotations

import json
import statistics
from pathlib import Path

from attack_suite.sampler import MemorySampler
from attack_suite.scenarios import MIB, Setup, local_groups
from swarm_node.node.observe.metrics import read_metrics
from swarm_node.node.sim.adversary import OVERSIZED_TASKS


def read_json(path: Path) -> dict:
    """A node's status file, or {} while it is not (yet, or completely) written."""
    try:
        return json.loads(path.read_text())
    except (OSError, json.JSONDecodeError):
        return {}


def finite(x) -> bool:
    """A number that is neither NaN nor infinite (a metric may hold either, or be missing)."""
    return isinstance(x, (int, float)) and x == x and x not in (float("inf"), float("-inf"))


def finite_mean(xs: list) -> float | None:
    """The mean of the finite numbers in ``xs``, None when there is none."""
    xs = [x for x in xs if finite(x)]
    return statistics.fmean(xs) if xs else None


def measure(name: str, attacks: tuple[str, ...], setup: Setup, run_dir: Path, sampler: MemorySampler) -> dict:
    """What each honest node measured, from its run folder (and the memory samples)."""
    adv = read_json(run_dir / "adversary0" / "status.json") if attacks else {}
    attacker = set(adv.get("identities") or []) | ({adv["peer_id"]} if adv.get("peer_id") else set())
    by_round = {int(k): v for k, v in (adv.get("groups_by_round") or {}).items()}
    lag = int(setup.flags.get("swarm.max_round_lag", 4))
    recs = [read_metrics(run_dir / f"node{i}" / "metrics.jsonl") for i in range(setup.nodes)]
    statuses = [read_json(run_dir / f"node{i}" / "status.json") for i in range(setup.nodes)]
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
        # The most one attacker key gave one step: a selection rule must never lift it past its share.
        attacker_max_step = max((v for x in r for p, v in (x.get("external_by_peer") or {}).items()
                                 if p in attacker), default=0)
        learner = [x for x in r if "loss" in x or "rho" in x]
        nan_steps = sum(1 for x in learner if not all(finite(x.get(k)) for k in ("loss", "grad_norm", "rho", "lr")))
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
            "attacker_used": used_attacker, "attacker_max_step": attacker_max_step,
            "rho_mean": finite_mean([x.get("rho") for x in learner]),
            "rho_min": min((x["rho"] for x in learner if finite(x.get("rho"))), default=None),
            "lr_factor_mean": finite_mean([x.get("lr_factor") for x in learner]),
            "reward_mean": finite_mean([x.get("reward") for x in r]),
            "nan_steps": nan_steps, "skipped_updates": log_text.count("non-finite gradient norm"),
            "max_rss_mb": sampler.node_peak[i] / MIB, "p2pd_max_rss_mb": sampler.p2pd_peak[i] / MIB,
            "rss_growth_mb": None if sampler.growth(i) is None else sampler.growth(i) / MIB,
            "rejected": sw.get("rejected") or {},
            "fetch_failures": sw.get("fetch_failures", 0), "refused_requests": sw.get("refused_requests", 0),
            "misdirected": sw.get("misdirected", 0),
            "backed_off": sw.get("backed_off", 0), "dropped_full": sw.get("dropped_full", 0),
            "pool_bytes": sw.get("pool_bytes", 0), "poll_errors": sw.get("poll_errors", 0),
            "internal_errors": sw.get("internal_errors", 0),
            "unusable_batches": sw.get("unusable_batches", 0), "unusable_backed_off": sw.get("unusable_backed_off", 0),
            "external_too_long": sum(x.get("external_too_long") or 0 for x in r),
            "phase": st.get("phase"),
        })
    rejected: dict[str, int] = {}
    for n in nodes:
        for k, v in n["rejected"].items():
            rejected[k] = rejected.get(k, 0) + v
    agg = {k: finite_mean([n[k] for n in nodes]) for k in (
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
                                                  "dropped_full", "unusable_batches", "unusable_backed_off",
                                                  "attacker_used", "external_too_long", "poll_errors",
                                                  "internal_errors")},
        max_pool_bytes=max(n["pool_bytes"] for n in nodes),
        attacker_max_step=max(n["attacker_max_step"] for n in nodes),
        honest_cpu_s=sum(sampler.cpu.values()), adversary_cpu_s=sum(sampler.adversary_cpu.values()))
    adversary = {k: adv.get(k) for k in ("peer_id", "sent", "refused", "stores", "fresh_keys", "served")} if attacks else None
    return {"scenario": name, "attacks": list(attacks), "nodes": nodes, "honest": agg, "adversary": adversary}
