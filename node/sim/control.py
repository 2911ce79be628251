"""The control nodes of a simulation: the same recipe trained alone, beside the swarm.

``swarm-node sim --control C`` adds C isolated nodes (the last C node folders) to the N sharing
ones. A control node runs ``swarm-node train`` (no transport: it neither sends nor receives) with
every flag the swarm's nodes get, except that it trains on the I groups a sharing node generates
itself per step: the same own generation per step, without the J groups the swarm adds. So the
summary and the held-out plot answer the question a person joining asks: did sharing pay off
against what this machine would have reached alone?

The flags are pure (``control_flags``); ``comparison`` reads the summary's node rows.
"""

from __future__ import annotations

import statistics
from typing import TYPE_CHECKING

from node.observe.held_out import held_out_score

if TYPE_CHECKING:
    from node.run.config import NodeConfig

__all__ = ["control_flags", "comparison", "comparison_lines"]


def control_flags(swarm_node: NodeConfig) -> dict[str, object]:
    """A control node's flags on top of every node's: no swarm, and the sharing node's own I groups
    a step (``swarm_node`` is a sharing node's config)."""
    return {"swarm.transport": "none", "generation.prompts_per_step": swarm_node.local_groups}


def _scores(rows: list[dict], key: str) -> list[float]:
    return [v for v in (held_out_score(r.get(key)) for r in rows) if v is not None]


def comparison(nodes: list[dict]) -> dict | None:
    """Held-out correctness of the sharing nodes against the control nodes, from the summary's
    rows (``role``, ``held_out_first``, ``held_out``): the means at the first and the last
    evaluation, each side's range at the last, and the margin (swarm mean - control mean). None
    unless both sides evaluated."""
    swarm = [n for n in nodes if n.get("role") == "swarm"]
    control = [n for n in nodes if n.get("role") == "control"]
    s_last, c_last = _scores(swarm, "held_out"), _scores(control, "held_out")
    if not s_last or not c_last:
        return None
    s_first, c_first = _scores(swarm, "held_out_first"), _scores(control, "held_out_first")
    mean = statistics.fmean
    return {
        "swarm_first": mean(s_first) if s_first else None, "control_first": mean(c_first) if c_first else None,
        "swarm_last": mean(s_last), "control_last": mean(c_last),
        "swarm_range": [min(s_last), max(s_last)], "control_range": [min(c_last), max(c_last)],
        "margin": mean(s_last) - mean(c_last),
        "steps": max((n["held_out"] or {}).get("step") or 0 for n in swarm + control),
    }


def comparison_lines(c: dict | None) -> list[str]:
    """The summary's paragraph on it (empty when there is nothing to compare)."""
    if c is None:
        return []

    def first(v: float | None) -> str:
        return "-" if v is None else f"{v:.3f}"

    verdict = (f"{abs(c['margin']):.3f} above" if c["margin"] > 0 else
               f"{abs(c['margin']):.3f} below" if c["margin"] < 0 else "level with")
    return ["", f"Swarm against control (held-out pass@1, greedy): the sharing nodes went from "
                f"{first(c['swarm_first'])} before training to {c['swarm_last']:.3f} at step {c['steps']} "
                f"(nodes {c['swarm_range'][0]:.3f}-{c['swarm_range'][1]:.3f}); the control node(s), training alone "
                f"on the same own generation per step, from {first(c['control_first'])} to {c['control_last']:.3f}. "
                f"The swarm ended {verdict} the control."]
