"""The soak's targets, each met or not, with the number that decides it: the report's table.

``met`` is True, False, or None where the run gave nothing to judge (a process that did not
live past its warm-up, a bound the configuration does not have)."""

from __future__ import annotations

from soak_suite.judge import CATCH_UP_S, MAX_FLAT_CHANGE, MAX_RSS_GROWTH, MIN_DELIVERY


def _pct(x: float | None) -> str:
    return "-" if x is None else f"{x * 100:+.1f}%"


def _ratio(x: float | None) -> str:
    return "-" if x is None else f"{x:.0%}"


def _worst(rows: list[dict], key: str, signed: bool = False) -> tuple[float | None, str]:
    """The largest |value| of ``key`` over the judged rows (``signed``: the largest value, for a
    bound on growth only: memory that shrank is no leak), and whose it is."""
    vals = [(r[key] if signed else abs(r[key]), r[key], f"{r['name']} pid {r['pid']}")
            for r in rows if r["judged"] and r.get(key) is not None]
    if not vals:
        return None, ""
    _, v, who = max(vals)
    return v, who


def _target(name: str, measured: str, met: bool | None) -> dict:
    return {"target": name, "measured": measured, "met": met}


def one_swarm(phases: list[dict]) -> dict:
    """Whether the swarm stayed one to the end: the last clean phase's honest delivery against the
    first's. Kills, the partition and the bootstrap's outage come and go; a node that rejoined into
    a swarm of its own (a restarted bootstrap knowing no one) hears fewer peers from then on, which
    each attack phase's ratio against the clean phases beside it cannot show."""
    clean = [p for p in phases if not p["attacks"] and p.get("rate") is not None]
    if len(clean) < 2:
        return _target(f"one swarm to the end: the last clean phase's honest delivery ≥ {MIN_DELIVERY:.0%} of the "
                       f"first's", "fewer than two clean phases", None)
    first, last = clean[0], clean[-1]
    ratio = last["rate"] / first["rate"] if first["rate"] else None
    return _target(f"one swarm to the end: the last clean phase's honest delivery ≥ {MIN_DELIVERY:.0%} of the first's",
                   f"{last['rate']:.1f} against {first['rate']:.1f} groups / node / min ({_ratio(ratio)})",
                   None if ratio is None else ratio >= MIN_DELIVERY)


def targets(j: dict) -> list[dict]:
    procs = j["processes"]
    judged = [r for r in procs if r["judged"]]
    short = len(procs) - len(judged)
    note = f" ({len(judged)} processes judged; {short} lived too briefly past their warm-up)" if short else \
        f" ({len(judged)} processes judged)"
    out = []
    for key, label, bound in (("rss_growth", "RSS growth of every node and the bootstrap peer", MAX_RSS_GROWTH),
                              ("p2pd_rss_growth", "RSS growth of their p2p daemons", MAX_RSS_GROWTH)):
        v, who = _worst(procs, key, signed=True)
        slopes = [r[key.replace("growth", "slope_mb_h")] for r in judged
                  if r.get(key.replace("growth", "slope_mb_h")) is not None]
        out.append(_target(f"{label} ≤ {bound:.0%} after the warm-up",
                           f"worst {_pct(v)} ({who}); steepest slope {max(slopes, default=0):+.1f} MB/h" + note
                           if v is not None else "nothing to judge" + note,
                           None if v is None else v <= bound))
    for key, label in (("fds_growth", "open descriptors (node processes)"), ("p2pd_fds_growth", "open descriptors (p2p daemons)"),
                       ("threads_growth", "threads")):
        v, who = _worst(procs, key)
        out.append(_target(f"{label} within ±{MAX_FLAT_CHANGE:.0%}", f"worst {_pct(v)} ({who})" if v is not None
                           else "nothing to judge", None if v is None else abs(v) <= MAX_FLAT_CHANGE))
    d = j["disk"]
    out.append(_target(f"checkpoints within run.keep_checkpoints + 1 = {d['bound_n_checkpoints']} at every sample",
                       f"at most {d['max_n_checkpoints']} complete checkpoints; {d['max_checkpoints_bytes'] / 1e6:.1f} MB with one being written "
                       f"(bound {d['bound_checkpoints_bytes'] / 1e6:.1f} MB)", d["checkpoints_within"]))
    out.append(_target("weight chunks within two versions of the model at every sample",
                       f"at most {d['max_chunks_bytes'] / 1e6:.1f} MB (bound {d['bound_chunks_bytes'] / 1e6:.1f} MB)",
                       d["chunks_within"]))
    out.append(_target("logs and metrics.jsonl (no configured bound: they grow with the run)",
                       f"logs {d['logs_mb_per_hour']:.1f} MB/h, metrics {d['metrics_mb_per_hour']:.1f} MB/h "
                       f"(all nodes)", None))
    r = j["resumes"]
    ok = sum(x["ok"] for x in r["resumes"])
    out.append(_target("every SIGKILL resumed from the newest checkpoint, which verified at the kill",
                       f"{ok} of {len(r['resumes'])}; steps redone per kill: "
                       f"{', '.join(str(x['redone_steps']) for x in r['resumes']) or '-'}",
                       None if not r["resumes"] else ok == len(r["resumes"])))
    cont = r["continuity"]
    bad = {n: c for n, c in cont.items() if not c["continuous"]}
    out.append(_target("metrics.jsonl continuous: every step once, none lost or twice",
                       f"{len(cont) - len(bad)} of {len(cont)} nodes" + "".join(
                           f"; {n}: missing {c['missing'][:5]}, twice {c['duplicated'][:5]}" for n, c in bad.items()),
                       not bad))
    out.append(_target("0 checkpoints failing verification",
                       f"{len(r['checkpoints_failing'])} of {r['checkpoints_checked']} checked", not r["checkpoints_failing"]))
    attack = [p for p in j["delivery"]["phases"] if p["attacks"]]
    ratios = [p["ratio"] for p in attack if p.get("ratio") is not None]
    out.append(_target(f"honest delivery ≥ {MIN_DELIVERY:.0%} of clean in every attack phase",
                       "; ".join(f"{p['name']} {_ratio(p.get('ratio'))} (sent {p.get('sent', 0)})"
                                 for p in attack) or "no attack phase",
                       None if len(ratios) < len(attack) or not attack else min(ratios) >= MIN_DELIVERY))
    out.append(one_swarm(j["delivery"]["phases"]))
    failed = j.get("failed") or {}
    out.append(_target("no node exited on its own (every exit was a kill or the soak's stop)",
                       "none" if not failed else ", ".join(f"{k}: exit {v}" for k, v in failed.items()), not failed))
    tb = j["tracebacks"]
    out.append(_target("no traceback in any log", "none" if not tb else ", ".join(f"{k}: {v}" for k, v in tb.items()),
                       not tb))
    lag = j["worker_lag"]
    out.append(_target(f"workers' lag behind the learner's published version ≤ broadcast.max_staleness "
                       f"(a restart may take {CATCH_UP_S:.0f} s to catch up)",
                       "; ".join(f"{n}: max {w['max']} (S = {w['max_staleness']}) in {w['samples']} samples, "
                                 f"catch-ups {', '.join(f'{c:.0f}' for c in w['catch_ups_s']) or '-'} s"
                                 + (f", still behind at the end ({w['behind_at_end_s']:.0f} s after a restart)"
                                    if "behind_at_end_s" in w else "")
                                 for n, w in lag.items()) or "no worker sample",
                       None if not lag else all(w["max"] <= (w["max_staleness"] or 0) for w in lag.values())))
    return out
