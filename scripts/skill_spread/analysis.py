"""The skill-spread study's statistics, from each node's held-out evaluations (pure but the plot).

A run is a list over its nodes of their evaluations in step order (node/observe/held_out.py's
``evaluations``: ``{"step", "families": {family: {"greedy", "sampled", "n"}}}``, step 0 first).
Node k holds family ``FAMILIES[k % len(FAMILIES)]``: it was warm-started on that family only.

- the bar of a family: half the level its holders reach alone (their mean last evaluation on it
  in the isolated arm of the same seed), the one target every arm races to;
- a node's reach: the first evaluated step at which its held-out score on a family it lacks is at
  the bar or above (None: not within the run); a node already there before training (its start
  evaluation) has nothing to learn from the spread and is left out of the speed-up;
- the speed-up of an arm: the mean reach of the nodes alone over the mean reach of the same nodes
  sharing, a node that never got there counted as the whole run;
- collapsed: a node whose held-out score on its own family ends below half its start.
"""

from __future__ import annotations

import statistics
from pathlib import Path

from common.curves import Curve, first_reach_at, mean_at_steps
from swarm_node.node.observe.held_out import held_out_score

FAMILIES = ("counting", "boolean")  # the two families the embedded model learns at level 2


def held_family(node: int) -> str:
    """The family node ``node`` was warm-started on."""
    return FAMILIES[node % len(FAMILIES)]


def family_curve(evals: list[dict], family: str) -> Curve:
    """A node's held-out score on ``family`` at each evaluation (greedy pass@1, or sampled pass@1
    where the node made no greedy completions)."""
    out = []
    for ev in evals:
        score = held_out_score((ev.get("families") or {}).get(family))
        if score is not None:
            out.append((ev["step"], score))
    return out


def bars(isolated: list[list[dict]]) -> dict[str, float]:
    """Per family, half the mean last score of its holders in the isolated run."""
    return {f: statistics.mean(family_curve(evals, f)[-1][1] for k, evals in enumerate(isolated)
                               if held_family(k) == f) / 2 for f in FAMILIES}


def node_rows(run: list[list[dict]], bar: dict[str, float]) -> list[dict]:
    """Per node: the family it holds, its first and last score on it and whether it collapsed
    (ended below half its start), and per family it lacks its first and last score and its reach."""
    rows = []
    for k, evals in enumerate(run):
        own = family_curve(evals, held_family(k))
        lacked = {f: family_curve(evals, f) for f in FAMILIES if f != held_family(k)}
        if not own or not all(lacked.values()):  # a node that died before evaluating: say so, not IndexError
            raise ValueError(f"node {k} has no held-out evaluation of every family (did it fail? see its log)")
        rows.append({"node": k, "holds": held_family(k), "own_start": own[0][1], "own_final": own[-1][1],
                     "collapsed": own[-1][1] < own[0][1] / 2,
                     "lacks": {f: {"start": c[0][1], "final": c[-1][1], "reach": first_reach_at(c, bar[f]),
                                   "there_at_start": c[0][1] >= bar[f]} for f, c in lacked.items()}})
    return rows


def reaches(rows: list[dict]) -> list[int | None]:
    """Every (node, lacked family)'s reach, in node order, but those at the bar before training
    (nothing spread to them: a warm start on one family can answer another's questions by chance)."""
    return [v["reach"] for r in rows for v in r["lacks"].values() if not v["there_at_start"]]


def mean_reach(reach: list[int | None], horizon: int) -> float | None:
    """The mean reach, one that never got there counted as the whole run (``horizon`` steps); None
    when there is no pair to measure (every non-holder was at the bar before training)."""
    return statistics.mean(horizon if r is None else r for r in reach) if reach else None


def speedup(alone: list[int | None], sharing: list[int | None], horizon: int) -> float | None:
    """How many times sooner the nodes reach the bar sharing than alone: mean reach alone over mean
    reach sharing (a miss counts as the whole run, so with misses it is a bound); None when the
    sharing nodes were there at their first evaluation (nothing to divide by)."""
    share, solo = mean_reach(sharing, horizon), mean_reach(alone, horizon)
    return solo / share if share and solo is not None else None


def plot_spread(curves: dict[str, dict[str, list[Curve]]], bar: dict[str, float], path: Path, title: str) -> None:
    """A panel per family (``curves``: family -> arm -> curves), one line per arm: the mean held-out
    score of the nodes that lack the family; its bar (half its holders' level alone) dashed."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(curves), figsize=(4.5 * len(curves), 4), sharey=True, squeeze=False)
    for ax, (family, arms) in zip(axes[0], curves.items()):
        for arm, cs in arms.items():
            m = mean_at_steps(cs)
            ax.plot([s for s, _ in m], [v for _, v in m], marker="o", label=arm)
        ax.axhline(bar[family], color="black", linestyle="--", linewidth=1, label="half the holders' level alone")
        ax.set_xlabel("step")
        ax.set_title(f"{family}, on the nodes that lack it")
        ax.grid(alpha=0.3)
        ax.legend()
    axes[0][0].set_ylabel("held-out pass@1 (greedy)")
    fig.suptitle(title)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=100)
    plt.close(fig)
