"""The control nodes of a simulation: the same recipe trained alone, beside the swarm.

``swarm-node sim --control C`` adds C isolated nodes (the last C node folders) to the N sharing
ones. A control node runs ``swarm-node train`` (no transport: it neither sends nor receives) with
every flag the swarm's nodes get, except that it trains on the I groups a sharing node generates
itself per step: the same own generation per step, without the J groups the swarm adds. So the
summary and the held-out plot answer the question a person joining asks: did sharing pay off
against what this machine would have reached alone?

The flags are pure (``control_flags``); ``comparison`` reads the nodes' evaluations. A control
node is not paced by the swarm's rounds, and a run can be stopped or resumed, so the two sides
are compared at the last step every one of them evaluated, on the same questions.
"""

from __future__ import annotations

import statistics
from typing import TYPE_CHECKING

from swarm_node.node.observe.held_out import held_out_score

if TYPE_CHECKING:
    from swarm_node.node.run.config import NodeConfig

__all__ = ["control_flags", "comparison", "comparison_lines"]


def control_flags(swarm_node: NodeConfig) -> dict[str, object]:
    """A control node's flags on top of every node's: no swarm, and the sharing node's own I groups
    a step (``swarm_node`` is a sharing node's config)."""
    return {"swarm.transport": "none", "generation.prompts_per_step": swarm_node.local_groups}


def _questions(ev: dict) -> tuple:
    """What an evaluation asked: its families and number of tasks (equal on equal settings)."""
    return tuple(sorted((f, d.get("n")) for f, d in (ev.get("families") or {}).items())), ev.get("n")


def comparison(roles: dict[str, str], series: dict[str, list[dict]]) -> dict | None:
    """Held-out correctness of the sharing nodes against the control nodes. ``roles`` maps each
    node to "swarm" or "control", ``series`` each node to its evaluations (node/observe/held_out.py
    ``evaluations``: step 0 first when made). None without both sides; ``{"incomparable": why}``
    when they share no evaluated step or evaluated different questions. Otherwise, at the last
    step every node evaluated: each side's mean and range, the margin (swarm mean − control mean),
    and the means before training when every node evaluated at step 0."""
    swarm = [n for n, r in roles.items() if r == "swarm"]
    control = [n for n, r in roles.items() if r == "control"]
    if not swarm or not control:
        return None
    nodes = swarm + control
    if any(not series.get(n) for n in nodes):
        return {"incomparable": "not every node evaluated: " + ", ".join(n for n in nodes if not series.get(n))}
    by_step = {n: {e["step"]: e for e in series[n]} for n in nodes}
    common = set.intersection(*(set(s) for s in by_step.values()))
    if not common:
        return {"incomparable": "the nodes share no evaluated step"}
    step = max(common)
    asked = {_questions(by_step[n][step]) for n in nodes}
    if len(asked) > 1:
        return {"incomparable": f"the nodes evaluated different questions at step {step} (different "
                                f"tasks or eval settings: a run folder resumed under another config?)"}

    def scores(side: list[str], at: int) -> list[float]:
        return [held_out_score(by_step[n][at]) or 0.0 for n in side]

    mean = statistics.fmean
    s_last, c_last = scores(swarm, step), scores(control, step)
    start = 0 in common and step != 0
    return {
        "step": step,
        "swarm_start": mean(scores(swarm, 0)) if start else None,
        "control_start": mean(scores(control, 0)) if start else None,
        "swarm_last": mean(s_last), "control_last": mean(c_last),
        "swarm_range": [min(s_last), max(s_last)], "control_range": [min(c_last), max(c_last)],
        "margin": mean(s_last) - mean(c_last),
    }


def comparison_lines(c: dict | None) -> list[str]:
    """The summary's paragraph on it (empty when there is nothing to compare)."""
    if c is None:
        return []
    if "incomparable" in c:
        return ["", f"Swarm against control: not compared ({c['incomparable']})."]

    def start(v: float | None) -> str:
        return "" if v is None else f"from {v:.3f} before training "

    verdict = (f"{abs(c['margin']):.3f} above" if c["margin"] > 0 else
               f"{abs(c['margin']):.3f} below" if c["margin"] < 0 else "level with")
    return ["", f"Swarm against control (held-out pass@1, greedy, at step {c['step']}, the last every node "
                f"evaluated): the sharing nodes went {start(c['swarm_start'])}to {c['swarm_last']:.3f} "
                f"(nodes {c['swarm_range'][0]:.3f}-{c['swarm_range'][1]:.3f}); the control node(s), training alone "
                f"on the same own generation per step, {start(c['control_start'])}to {c['control_last']:.3f}. "
                f"The swarm ended {verdict} the control."]
