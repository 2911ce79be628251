"""The attack suite's judgement: the clean runs' baseline (their mean, and their spread: the
run-to-run noise), and each target an attack scenario must meet against it."""

from __future__ import annotations

from attack_suite.measure import finite, finite_mean
from attack_suite.scenarios import (DECODE_SLACK, EXPECTED_REJECTIONS, EXPECTED_COUNTERS, MAX_GROWTH, MIB,
                                    MUST_BE_REFUSED, POOL_BYTES_CAP, RHO_ATTACKS, RHO_TOLERANCE, Setup,
                                    sender_cap_of)
from swarm_node.node.sim.adversary import ADMITTED_BY_DESIGN


def clean_baseline(cleans: list[dict]) -> dict:
    """Mean of the clean runs, and their spread (the run-to-run noise)."""
    for c in cleans:  # runs measured before pace was recorded
        h = c["honest"]
        h.setdefault("pace", finite_mean([s / (s + (k or 0)) for s, k in zip(h["steps"], h["rounds_skipped"]) if s]))
    keys = ("honest_received_per_step", "delivered", "honest_used_per_step", "rho_mean", "lr_factor_mean",
            "reward_mean", "max_rss_mb", "pace", "honest_cpu_s")
    base = {k: finite_mean([c["honest"].get(k) for c in cleans]) for k in keys}
    base["spread"] = {k: (max(c["honest"][k] for c in cleans) - min(c["honest"][k] for c in cleans))
                      if all(finite(c["honest"].get(k)) for c in cleans) else None for k in keys}
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
        pace = finite_mean([s / (s + (k or 0)) for s, k in zip(h["steps"], h["rounds_skipped"]) if s])
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
    for counter in dict.fromkeys(c for a in attacks for c in EXPECTED_COUNTERS.get(a, ())):
        out[counter] = {"ok": h[counter] > 0, "count": h[counter]}
    stores = (result.get("adversary") or {}).get("stores") or {}
    for kind in (k for a in attacks for k in MUST_BE_REFUSED.get(a, ())):
        s = stores.get(kind) or {}
        out[f"refused:{kind}"] = {"ok": bool(s) and s.get("kept", 0) == 0 and s.get("refused", 0) > 0, **s}
    if attacks and not set(attacks) & set(ADMITTED_BY_DESIGN):
        out["attacker_never_trained_on"] = {"ok": h["attacker_used"] == 0, "groups": h["attacker_used"]}
    elif attacks and "attacker_max_step" in h:  # admitted by design: never more than one sender's share of a step
        cap = sender_cap_of(setup)
        out["within_share"] = {"ok": h["attacker_max_step"] <= cap, "most_in_a_step": h["attacker_max_step"],
                               "cap": cap}
    return out
