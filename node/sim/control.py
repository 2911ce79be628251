"""The control nodes of a simulation: the same recipe trained alone, beside the swarm.

``swarm-node sim --control C`` adds C isolated nodes (the last C node folders) to the N sharing
ones. A control node runs ``swarm-node train`` (no transport: it neither sends nor receives) with
every flag the swarm's nodes get, except that it trains on the I groups a sharing node generates
itself per step: the same own generation per step, without the J groups the swarm adds. So the
summary and the held-out plot answer the question a person joining asks: did sharing pay off
against what this machine would have reached alone?

The flags are pure (``control_flags``); ``comparison`` reads the nodes' evaluations. A control
node is not paced by the swarm's rounds, and a run can be stopped or resumed, so the two sides
are compared at the steps every one of them evaluated, on the same questions: by their end scores,
each node's mean over the last three of those steps (node/observe/held_out.py ``end_steps``), in
greedy and in sampled pass@1. A control generates what a sharing node generates itself each step,
so equal steps are equal own generation; wall-clock is not compared (the controls share the
machine with the swarm, so their time is not what the machine alone would take).

Each control node has its own seed (``train.seed`` + its index, node/sim/argv.py), so C controls
are C independent trajectories. The sharing nodes are not: they train on each other's groups, so
the N of them are closer to one sample of the swarm than to N independent runs (issue 37). One sim
therefore reports the margin (swarm mean − control mean of the end scores) and each side's range,
and no confidence interval: one computed over these nodes as if they were independent would say
95% and cover far less. An interval belongs over seeds, each arm rerun and paired by seed
(scripts/exp_payoff.py, with node/observe/paired.py's ``paired_comparison``).
"""

from __future__ import annotations

import statistics
from typing import TYPE_CHECKING

from swarm_node.node.observe.held_out import end_steps, held_out_score

if TYPE_CHECKING:
    from swarm_node.node.config.config import NodeConfig

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
    when they share no evaluated step or evaluated different questions. Otherwise:

    - at the last step every node evaluated (``step``): each side's mean and range and the margin
      (swarm mean − control mean) of ``held_out_score`` (as before the end score);
    - the means before training when every node evaluated at step 0;
    - ``end``: at ``end_steps`` (the last three steps every node evaluated after step 0), per
      statistic ("greedy", "sampled": those every node measured there), each side's mean of its
      nodes' end scores, their range and the margin (no interval: module docstring)."""
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
    ends = end_steps(common)
    for at in sorted({step, *ends}):
        if len({_questions(by_step[n][at]) for n in nodes}) > 1:
            return {"incomparable": f"the nodes evaluated different questions at step {at} (different "
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
        "controls": len(control),
        "end_steps": ends,
        "end": {metric: _end_sides(metric, swarm, control, by_step, ends) for metric in ("greedy", "sampled")
                if all(by_step[n][at].get(metric) is not None for n in nodes for at in ends)},
    }


def _end_sides(metric: str, swarm: list[str], control: list[str], by_step: dict, ends: list[int]) -> dict:
    """Both sides' end scores of ``metric``: means, ranges and the margin."""
    def ends_of(side: list[str]) -> list[float]:
        return [statistics.fmean(by_step[n][at][metric] for at in ends) for n in side]

    s, c = ends_of(swarm), ends_of(control)
    return {"swarm": statistics.fmean(s), "control": statistics.fmean(c), "swarm_range": [min(s), max(s)],
            "control_range": [min(c), max(c)], "margin": statistics.fmean(s) - statistics.fmean(c)}


def _end_words(steps: list[int]) -> str:
    """``steps 150, 175 and 200, the last three every node evaluated after training began``."""
    if steps == [0]:
        return "step 0, before training (the nodes share no evaluated step after it)"
    where = f"steps {', '.join(map(str, steps[:-1]))} and {steps[-1]}" if len(steps) > 1 else f"step {steps[0]}"
    count = {1: "the only one", 2: "the last two", 3: "the last three"}.get(len(steps), f"the last {len(steps)}")
    return f"{where}, {count} every node evaluated after training began"


def _verdict(margin: float) -> str:
    return (f"{abs(margin):.3f} above" if margin > 0 else f"{abs(margin):.3f} below" if margin < 0 else "level with")


ONE_SAMPLE = ("One sim is one sample of the swarm: its sharing nodes learn from each other, so they are not "
              "independent runs and the ranges are this run's spread, not a rerun's. No confidence interval is "
              "given here; one belongs over seeds, each arm rerun and paired by seed (scripts/exp_payoff.py).")


def comparison_lines(c: dict | None) -> list[str]:
    """The summary's paragraph on it (empty when there is nothing to compare)."""
    if c is None:
        return []
    if "incomparable" in c:
        return ["", f"Swarm against control: not compared ({c['incomparable']})."]

    def start(v: float | None) -> str:
        return "" if v is None else f"from {v:.3f} before training "

    end = c.get("end") or {}
    if not end:  # an older summary, or a statistic missing at the end steps: the last step's score
        return ["", f"Swarm against control (held-out pass@1, greedy, at step {c['step']}, the last every node "
                    f"evaluated): the sharing nodes went {start(c['swarm_start'])}to {c['swarm_last']:.3f} "
                    f"(nodes {c['swarm_range'][0]:.3f}-{c['swarm_range'][1]:.3f}); the control node(s), training "
                    f"alone on the same own generation per step, {start(c['control_start'])}to "
                    f"{c['control_last']:.3f}. The swarm ended {_verdict(c['margin'])} the control.", "", ONE_SAMPLE]
    lines = ["", f"Swarm against control on held-out questions, by the end score: each node's mean over its "
                 f"evaluations at {_end_words(c['end_steps'])} (the whole curve: held_out.png). The control "
                 f"node(s) train alone on the same own generation per step, each on its own seed."]
    for metric, e in end.items():
        before = (f" (before training: sharing {c['swarm_start']:.3f}, control {c['control_start']:.3f})"
                  if metric == "greedy" and c["swarm_start"] is not None else "")
        lines.append(f"- {metric} pass@1: sharing nodes {e['swarm']:.3f} (nodes {e['swarm_range'][0]:.3f}-"
                     f"{e['swarm_range'][1]:.3f}), control {e['control']:.3f} ({e['control_range'][0]:.3f}-"
                     f"{e['control_range'][1]:.3f}){before}: margin {e['margin']:+.3f}, the swarm ended "
                     f"{_verdict(e['margin'])} the control.")
    return [*lines, "", ONE_SAMPLE]
