"""The end of a ``swarm-node sim`` run: summary.json and summary.md (one row per node: steps,
correctness first/last, held-out before training and its end score (the mean of its last three
evaluations: node/observe/held_out.py), peer groups used,
rejections, faults; each adversary's tally; the sharing nodes against the control nodes), the
plots, and the end time in sim.json. A stopped run's summary is marked partial; an earlier run's
is removed when a run starts.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import TYPE_CHECKING

from swarm_node.node.sim.control import comparison, comparison_lines
from swarm_node.node.sim.spec import SimSpec, is_control, node_name
from swarm_node.node.sim.table import fmt, read_status

if TYPE_CHECKING:
    from swarm_node.node.sim.kills import KillFaults


def fault_text(n: dict) -> str:
    """A summary row's faults column: restarts, messages a partition dropped, delayed deliveries."""
    parts = [f"restarted {n['restarts']}x" if n["restarts"] else "",
             f"{n['fault_dropped']} messages dropped (partition)" if n["fault_dropped"] else "",
             f"{n['fault_delayed']} deliveries delayed" if n["fault_delayed"] else ""]
    return ", ".join(p for p in parts if p) or "-"


SUMMARY_FILES = ("summary.json", "summary.md", "reward.png", "ess.png", "held_out.png")


def clear_summary(run_dir: Path) -> None:
    """Remove an earlier run's summary and plots: a run stopped before it writes its own must not
    leave them looking current."""
    for name in SUMMARY_FILES:
        (run_dir / name).unlink(missing_ok=True)


def partial_line(wall_s: float, stopped_by: list[str], stopping: bool) -> str:
    """summary.md's line under the title for a run stopped before its end."""
    names = {"SIGINT": "Ctrl-C (SIGINT)"}
    how = f"by {names.get(stopped_by[0], stopped_by[0])}" if stopped_by else "before its end"
    line = (f"**Partial**: the run was stopped {how} after {wall_s:.0f} s; each row covers the steps that "
            f"node had finished.")
    if stopping:
        line += " Written as the stop began: the nodes were still stopping (rewritten once they have)."
    return line


def write_summary(spec: SimSpec, wall_s: float, interrupted: bool, failed: dict,
                  faults: KillFaults | None = None, *, stopped_by: list[str] | None = None,
                  stopping: bool = False) -> dict:
    """Write summary.json and summary.md (and the plots, unless ``stopping``: written as a stop
    begins, then again once the nodes have stopped); ``interrupted`` marks it partial."""
    from swarm_node.node.observe.held_out import end_score, evaluations, held_out_score, last_eval
    from swarm_node.node.observe.metrics import read_metrics, summary_window
    from swarm_node.node.observe.plots import plot_swarm

    nodes, series = [], {}
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
        series[f"node{i}"] = evaluations(recs, d)
        nodes.append({
            "node": f"node{i}", "role": "control" if is_control(spec, i) else "swarm",
            "peer_id": sw.get("peer_id"), "steps": len(recs),
            "correct_first": sum(correct[:w]) / w if correct else None,
            "correct_last": sum(correct[-w:]) / w if correct else None,
            # before training (eval.at_start), or None: no step's record is step 0
            "held_out_start": next((e for e in series[f"node{i}"] if e["step"] == 0), None),
            "held_out": last_eval(recs),  # the last held-out evaluation, per family too (or None)
            "held_out_end": end_score(series[f"node{i}"]),  # the mean of the last three (or None)
            "held_out_curve": [[e["step"], e.get("greedy"), e.get("sampled")] for e in series[f"node{i}"]],
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
    versus = comparison({n["node"]: n["role"] for n in nodes}, series)
    summary = {"nodes": nodes, "adversaries": adversaries, "transport": spec.transport, "versus_control": versus,
               "wall_s": round(wall_s, 1), "interrupted": interrupted, "partial": interrupted,
               "stopped_by": (stopped_by or [None])[0], "stopping": stopping, "failed": failed,
               "run_dir": str(spec.run_dir), "window": w,
               "kills": list(faults.done) if faults is not None else []}  # each: node, at (unix), step, checkpoint
    summary["plots"] = [] if stopping else [str(p) for p in plot_swarm(spec.run_dir, spec.nodes, control=spec.control)]
    title = f"{spec.nodes - spec.control} nodes" + (f" and {spec.control} control" if spec.control else "")
    lines = [f"# swarm-node sim: {title} over {spec.transport}", ""]
    if interrupted:
        lines += [partial_line(wall_s, stopped_by or [], stopping), ""]
    lines += [
             f"| node | steps | correct first {w} | correct last {w} | held-out before | held-out end | peer groups used | "
             f"peers used | rollouts out | rejected | faults |",
             "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|"]
    for i, n in enumerate(nodes):
        rej = ", ".join(f"{k} {v}" for k, v in sorted(n["rejected"].items()))
        lines.append(f"| {node_name(spec, i)} | {n['steps']} | {fmt(n['correct_first'], '.3f')} | {fmt(n['correct_last'], '.3f')} | "
                     f"{fmt(held_out_score(n['held_out_start']), '.3f')} | {fmt((n['held_out_end'] or {}).get('score'), '.3f')} | "
                     f"{fmt(n['groups_used'])} | {fmt(n['peers_used'])} | {fmt(n['rollouts_out'])} | "
                     f"{fmt(n['rejected_total'])}{f' ({rej})' if rej else ''} | {fault_text(n)} |")
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
    lines += comparison_lines(versus)
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
