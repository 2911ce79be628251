"""``export``: write a run's checkpoint as a plain Hugging Face folder to take away (LoRA merged, or
the adapter alone), with its tokenizer and a model card (node/evaluate/export.py does the work)."""

from __future__ import annotations

import argparse

from swarm_node.node.cli.flags import overrides as config_overrides


def run_export(args: argparse.Namespace, unknown: list[str]) -> int:
    """Export RUN_OR_CHECKPOINT (``--step N``, or the newest valid checkpoint) into ``--out``."""
    from swarm_node.node.observe.logs import setup_logging

    overrides = config_overrides(args, unknown)  # --model.device / --model.dtype: the parser knows no others
    setup_logging()
    from swarm_node.node.evaluate.export import export_model

    done = export_model(args.source, args.out, step=args.step, adapter_only=args.adapter, overrides=overrides)
    what = "the LoRA adapter" if done.adapter_only else "the model"
    print(f"exported {what} of {done.run_dir} at step {done.step} (policy v{done.policy_version}, "
          f"{done.checkpoint.name}) to {done.out}: {', '.join(done.files)}")
    load = "PeftModel.from_pretrained(base, DIR)" if done.adapter_only else "AutoModelForCausalLM.from_pretrained(DIR)"
    print(f"load it with {load}; README.md in it says how it was trained")
    return 0
