"""What ``swarm-node sim`` says before anything starts: what an earlier run in the folder means, and
warnings about this one.

node/cli/sim.py calls both before launching: a finished earlier run is a message and exit 0, a
folder of checkpoints without ``--resume`` is refused, and a warning (a kill before the first
checkpoint, batches that will coincide) is logged but the run goes ahead.
"""

from __future__ import annotations

from pathlib import Path

from swarm_node.node.errors import ConfigError
from swarm_node.node.sim.spec import SimSpec


def newest_checkpoint_step(node_dir: Path) -> int | None:
    """Step of the checkpoint a node in ``node_dir`` would resume from (the newest that
    verifies: a corrupt newer one does not count), None if there is none."""
    from swarm_node.node.checkpoint.checkpoint import checkpoint_step, newest_valid

    found = newest_valid(node_dir / "checkpoints")
    return checkpoint_step(found) if found is not None else None


def check_prior_run(spec: SimSpec, steps: list[int], resume: bool) -> str | None:
    """What an earlier run in ``spec.run_dir`` means for this one, before anything starts.

    Returns a message when every node has already trained its steps (the caller says so and
    exits 0); raises ``ConfigError`` when the folder holds checkpoints and this run would start
    over (every node would refuse); None when there is work to do.
    """
    done = [newest_checkpoint_step(spec.run_dir / f"node{i}") for i in range(spec.nodes)]
    if not resume:
        has = [f"node{i} (step {d})" for i, d in enumerate(done) if d is not None]
        if has:
            raise ConfigError(f"{spec.run_dir} already holds a run with checkpoints ({', '.join(has)}): pass "
                              f"--resume (or run.resume = true) to continue it, or choose another --run.dir")
        return None
    if all(d is not None and d >= n for d, n in zip(done, steps)):
        return (f"{spec.run_dir}: every node has already trained its {max(steps)} steps, so there is "
                f"nothing to do. To train on, raise the step count (e.g. --train.steps {2 * max(steps)}, or "
                f"make demo DEMO_ARGS=\"--train.steps {2 * max(steps)}\"); to start over, choose another "
                f"--run.dir or delete {spec.run_dir}.")
    return None


def startup_warnings(spec: SimSpec, cfgs: list) -> list[str]:
    """Things about this run a user should know before it starts (not errors: it can run);
    ``cfgs[i]`` is node i's config."""
    from swarm_node.node.config.config import batch_overlap

    out = []
    for k in spec.faults.kill:
        if k.at_step is None:  # a kill at a time: which step it meets is not known before the run
            continue
        every = cfgs[k.node].run.checkpoint_every
        # A kill at the checkpoint's own step resumes from it (the node writes the checkpoint
        # before the status that triggers the kill): only earlier kills lose their steps.
        if every == 0 or k.at_step < every:
            first = "at the end" if every == 0 else f"at step {every}"
            out.append(f"[[kill]] node{k.node} at step {k.at_step}: its first checkpoint is {first} "
                       f"(run.checkpoint_every = {every}), so it restarts from step 0 and redoes "
                       f"{k.at_step} steps; to resume where it was killed, pass --run.checkpoint_every "
                       f"{k.at_step} or less")
    out += _changed_recipes(spec, cfgs)
    out += _taught_held_out(cfgs)
    sharing = cfgs[:spec.nodes - spec.control]  # the control nodes share nothing
    c = sharing[0]
    advice = batch_overlap(len(sharing) - 1, c.generation.prompts_per_step, c.swarm.external_groups,
                           c.swarm.max_sender_share)
    if advice is not None and all(x.generation.prompts_per_step == c.generation.prompts_per_step
                                  and x.swarm.external_groups == c.swarm.external_groups
                                  and x.swarm.max_sender_share == c.swarm.max_sender_share for x in sharing):
        out.append(f"with {len(sharing)} nodes, {advice[0].lower()}{advice[1:]}")
    return out


def _taught_held_out(cfgs: list) -> list[str]:
    """Once for the run, not once per node: an evaluation on the embedded default model that may
    ask questions its warm start was taught (the nodes' own check, node/evaluate/evaluate.py)."""
    from swarm_node.policies.default_model import held_out_warning

    said = {held_out_warning(c.tasks.names, c.tasks.difficulties, c.eval.tasks_per_family)
            for c in cfgs if c.model.name == "default" and (c.eval.every or c.eval.at_end)}
    return sorted(w for w in said if w is not None)


def _changed_recipes(spec: SimSpec, cfgs: list) -> list[str]:
    """Nodes that will resume a checkpoint trained on other tasks, another evaluation or another
    role (sharing or control) than this run asks: their curves and held-out numbers would mix the
    two (an old ``runs/demo`` after the demo changed, say)."""
    import json

    out = []
    for i, c in enumerate(cfgs):
        node_dir = spec.run_dir / f"node{i}"
        try:
            saved = json.loads((node_dir / "config.json").read_text())
        except (OSError, ValueError):
            continue
        if not isinstance(saved, dict) or newest_checkpoint_step(node_dir) is None:
            continue
        now = c.model_dump()
        changed = [k for k in ("tasks", "eval") if saved.get(k) != now[k]]
        if ((saved.get("swarm") or {}).get("transport") == "none") != (c.swarm.transport == "none"):
            changed.append("role (sharing or control)")
        if changed:
            out.append(f"node{i} resumes a checkpoint trained with another {', '.join(changed)} than this run "
                       f"asks for: its numbers will mix the two; to start over, choose another --run.dir or "
                       f"delete {spec.run_dir}")
    return out
