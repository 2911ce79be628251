"""The live view of ``swarm-node sim``: one row per node (and adversary) from each one's
``status.json``, drawn as a rich table or logged as one plain line.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING

from swarm_node.node.observe.held_out import held_out_score
from swarm_node.node.observe.status import describe_phase
from swarm_node.node.sim.spec import SimSpec, node_name, processes

if TYPE_CHECKING:  # annotations only (kills.py reads these rows: importing it here would be a cycle)
    from swarm_node.node.sim.children import Children
    from swarm_node.node.sim.kills import KillFaults


def read_status(node_dir: Path) -> dict | None:
    try:
        return json.loads((node_dir / "status.json").read_text())
    except (OSError, json.JSONDecodeError):
        return None


def status_rows(spec: SimSpec, faults: KillFaults | None = None, kids: Children | None = None) -> list[dict]:
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
            "node": node_name(spec, i), "round": last.get("round"), "step": st.get("step", 0),
            "total": st.get("total_steps"), "reward": last.get("reward"), "correct": last.get("correct"),
            "held_out": held_out_score(st.get("eval")),  # the latest held-out evaluation's (status.json)
            "ess": last.get("rho"), "lr_factor": last.get("lr_factor"),
            "in": sw.get("groups_used"), "out": sw.get("rollouts_out"), "peers": sw.get("peers_alive"),
            "rejected": sw.get("rejected_total"), "rejected_by": sw.get("rejected") or {},
            "restarts": faults.restarts[i] if faults is not None else 0,
            "down": faults is not None and i in faults.down,
            "partitioned": bool(sw.get("partitioned")), "fault_dropped": sw.get("fault_dropped", 0),
            "delay": sw.get("fault_delay_s", 0.0), "stale": (last.get("staleness") or 0),
            "phase": phase, "note": st.get("note"),
            "link": sw.get("link", "up"), "outages": sw.get("outages", 0),
            "via": sw.get("found_via"),  # how its join found the swarm: bootstrap, peer cache, broker...
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
        return f"publishes v{fmt(b.get('published_version'))} to {b.get('followers', 0)}"
    text = f"v{fmt(b.get('applied_version'))} (lag {fmt(b.get('lag'))})"
    t = b.get("transfer")
    if t:
        src = max(t.get("from") or {"-": 0}, key=lambda k: (t.get("from") or {}).get(k, 0))
        text += f", v{t['version']} {100 * t['bytes'] / max(t['total'], 1):.0f}% from {src[:10]}"
    return text


def fmt(v, spec: str = "") -> str:
    """A cell: ``-`` for a value not known (yet)."""
    return "-" if v is None else format(v, spec)


def plain_line(rows: list[dict]) -> str:
    """The rows as one log line, for a terminal that cannot hold the live table."""
    return "; ".join(
        f"{r['node']} {r['phase']} step {r['step']} correct {fmt(r['correct'], '.3f')} "
        f"held-out {fmt(r.get('held_out'), '.3f')} "
        f"ESS/B {fmt(r['ess'], '.3f')} in {fmt(r['in'])} rejected {fmt(r['rejected'])} "
        + (f"via {r['via']} " if r.get("via") else "") +
        f"restarts {r['restarts']}" + (f" weights {r['weights']}" if r.get("weights", "-") != "-" else "")
        if not r.get("adversary") else f"{r['node']} sent {r['sent']}" for r in rows)


def render_table(rows: list[dict], title: str):
    from rich.table import Table

    t = Table(title=title)
    weights = any(r.get("weights", "-") != "-" for r in rows)
    for col in ("node", "phase", "round", "step", "reward", "correct", "held-out", "ESS/B", "LR factor", "groups in",
                "rollouts out", "peers", "found via", "rejected", "faults") + (("weights",) if weights else ()):
        t.add_column(col, justify="left" if col in ("phase", "weights") else "right")
    for r in rows:
        if r.get("adversary"):
            sent = ", ".join(f"{k} {v}" for k, v in sorted(r["sent"].items()) if v)
            t.add_row(r["node"], "malicious", *["-"] * 12, f"sent {sum(r['sent'].values())} ({sent})",
                      *(["-"] if weights else []))
            continue
        rej = ", ".join(f"{k} {v}" for k, v in sorted(r["rejected_by"].items()))
        fault = " ".join(x for x in (
            "DOWN" if r["down"] else "", f"restarted {r['restarts']}x" if r["restarts"] else "",
            f"LINK {r['link'].upper()}" if r["link"] != "up" else "",
            f"{r['outages']} link outage(s)" if r["outages"] else "",
            "PARTITIONED" if r["partitioned"] else "", f"dropped {r['fault_dropped']}" if r["fault_dropped"] else "",
            f"+{r['delay']:g}s latency" if r["delay"] else "", f"stale {r['stale']:g}" if r["stale"] else "") if x)
        t.add_row(r["node"], "down" if r["down"] else r["phase"], fmt(r["round"]), f"{r['step']}/{fmt(r['total'])}",
                  fmt(r["reward"], ".3f"),
                  fmt(r["correct"], ".3f"), fmt(r.get("held_out"), ".3f"), fmt(r["ess"], ".3f"),
                  fmt(r["lr_factor"], ".2f"), fmt(r["in"]),
                  fmt(r["out"]), fmt(r["peers"]), fmt(r.get("via")), fmt(r["rejected"]) + (f" ({rej})" if rej else ""), fault,
                  *([r.get("weights", "-")] if weights else []))
    return t
