"""``eval``: evaluate a run's checkpoint on the held-out tasks after the fact, print a table per
family and write ``RUN/eval/step_N.json`` (node/evaluate/eval_checkpoint.py does the work)."""

from __future__ import annotations

import argparse

from swarm_node.node.cli.flags import overrides as config_overrides


def run_eval(args: argparse.Namespace, unknown: list[str]) -> int:
    """Load RUN's config and checkpoint (``--step N``, or the newest), evaluate, print, write."""
    from swarm_node.node.observe.logs import setup_logging

    overrides = config_overrides(args, unknown)  # --eval.* and --model.device: the parser knows no others
    setup_logging()
    from swarm_node.node.observe.held_out import eval_file
    from swarm_node.node.evaluate.eval_checkpoint import evaluate_checkpoint, find_checkpoint, run_config

    cfg = run_config(args.run_dir, overrides)
    path = find_checkpoint(args.run_dir, args.step)
    result = evaluate_checkpoint(args.run_dir, cfg, path)
    print("\n".join(table(result)))
    print(f"wrote {eval_file(args.run_dir, result['step'])}")
    return 0


def table(result: dict) -> list[str]:
    """The result as a few lines: a heading, then one row per family and one for all of them, and
    the families left out for want of held-out questions."""
    s, k = result["settings"], result.get("k")
    what = " + ".join(x for x in ("greedy" if s["greedy"] else "",
                                  f"{s['samples']} samples" if s["samples"] else "") if x)
    cols = [c for c in ("greedy", "sampled", "pass_at_k") if result.get(c) is not None]
    names = {"greedy": "greedy pass@1", "sampled": "sampled pass@1", "pass_at_k": f"pass@{k}"}
    rows = [*result["families"].items(), ("all", result)]
    # A source's family name carries its digest (rg_basic_arithmetic_1a2b3c4d): the longest sets the width.
    width = max(12, *(len(family) for family, _ in rows))
    lines = [f"held-out evaluation of {result['run_dir']} at step {result['step']} "
             f"(policy v{result['policy_version']}): {s['tasks_per_family']} tasks per family, {what}, "
             f"{result['seconds']:.1f} s",
             f"{'family':<{width}} {'tasks':>5}" + "".join(f" {names[c]:>15}" for c in cols)]
    for family, d in rows:
        lines.append(f"{family:<{width}} {d['n']:>5}" + "".join(f" {d[c]:>15.3f}" for c in cols))
    if result.get("unevaluated"):
        lines.append(f"not evaluated (no held-out questions): {', '.join(result['unevaluated'])}")
    return lines
