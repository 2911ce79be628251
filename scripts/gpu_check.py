"""The prepared GPU check: a real training node on CUDA, bf16 + LoRA, every learner option.

    bash scripts/gpu_check.sh                       # on a GPU machine: writes $OUT/gpu_check.json
    python scripts/gpu_check.py --device cpu --quick --out /tmp/gpu_check.json   # the same code on a CPU

Nothing is downloaded: a tokenizer is trained from the task corpus (as the embedded default
model's is) and a model of Qwen2.5-0.5B's shape (152k vocabulary) is built from its config with
random weights, saved, and loaded by the node's own loading code. Then, each a fresh node
(``TrainingNode``, as ``swarm-node train`` runs it) for ``--steps`` steps:

- baselines mean, median (MC-GRPO), opob (exact), opob_approx, and the M2PO trust region, in bf16
  with a LoRA adapter and gradient checkpointing, the memory profile's micro-batch;
- generation overlapped with learning (``train.max_async 1``: a copy of the policy samples on its
  own CUDA stream while the learner trains), APRIL partial rollouts (``generation.over_provision
  0.5``) and both, beside the synchronous ``mean`` run (step time against max(generation, learning));
- out-of-memory recovery: on CUDA, the card is filled with a ballast tensor until the whole batch
  no longer fits in one learner pass (a real CUDA out-of-memory error, not an injected one); on the
  CPU the error is injected (``--quick``), so the path is the same code but proves nothing about
  CUDA's allocator.

Written to the JSON: per run the peak memory (``torch.cuda.max_memory_allocated``, per step),
generation tokens/s, learner step time, micro-batch and halvings, and the memory profile's
estimate beside the measured peak. Where no GPU machine is lent, this runs only in its CPU form
(tests/test_scripts.py).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from common.report import write_json  # noqa: E402

# The synchronous loop first, then what overlaps it (node/run/overlap.py, node/run/april.py): the
# runs that matter most come first, so a timeout still leaves them in the JSON.
OPTIONS = {
    "mean": {"learner.baseline": "mean"},
    "overlap": {"train.max_async": 1},
    "april": {"generation.over_provision": 0.5},
    "overlap_april": {"train.max_async": 1, "generation.over_provision": 0.5},
    "median": {"learner.baseline": "median"},
    "opob": {"learner.baseline": "opob"},
    "opob_approx": {"learner.baseline": "opob_approx"},
    "m2po": {"learner.m2po_tau": 0.04},
}
QWEN05 = dict(hidden_size=896, intermediate_size=4864, num_hidden_layers=24, vocab_size=151936,
              num_attention_heads=14, num_key_value_heads=2, tie_word_embeddings=True, max_position_embeddings=4096)
TINY = dict(hidden_size=64, intermediate_size=128, num_hidden_layers=2, vocab_size=4096,
            num_attention_heads=4, num_key_value_heads=2, tie_word_embeddings=True, max_position_embeddings=512)


def build_model(out: Path, shape: dict, dtype: str) -> Path:
    """A tokenizer trained here and a randomly initialised Qwen2 of ``shape``, saved as a
    Hugging Face checkpoint (what ``Policy.load`` reads)."""
    import torch
    from transformers import Qwen2Config, Qwen2ForCausalLM

    from swarm_node.policies.default_model import DefaultModelRecipe, _train_tokenizer

    tok = _train_tokenizer(DefaultModelRecipe(vocab_size=384))
    cfg = Qwen2Config(**shape, eos_token_id=tok.eos_token_id, pad_token_id=tok.pad_token_id,
                      bos_token_id=tok.eos_token_id)
    torch.manual_seed(0)
    with torch.device("cpu"):
        model = Qwen2ForCausalLM(cfg).to(getattr(torch, dtype))
    model.save_pretrained(out, safe_serialization=True)
    tok.save_pretrained(out)
    return out


def node_config(model: Path, run: Path, device: str, steps: int, quick: bool, **over):
    from swarm_node.node.config.config import load_config

    base = {"model.name": str(model), "model.device": device, "model.dtype": "bfloat16",
            "model.lora_rank": 16, "model.gradient_checkpointing": True,
            "generation.prompts_per_step": 4 if quick else 8, "generation.num_generations": 4 if quick else 8,
            "generation.max_completion_length": 8 if quick else 128,
            "learner.warmup_steps": 0, "train.steps": steps, "run.dir": str(run), "run.progress": "off",
            "run.plot": False, "run.checkpoint_every": 0, "tasks.difficulties": [1],
            # Held-out evaluation is not what this checks, and on this shape it cost 80 s a run.
            "eval.every": 0, "eval.at_end": False}
    base.update(over)
    return load_config(None, base)


def train(cfg) -> list[dict]:
    from swarm_node.node.observe.metrics import read_metrics
    from swarm_node.node.run.trainer import TrainingNode

    async def go():
        node = await TrainingNode.create(cfg)
        try:
            await node.run()
        finally:
            await node.close()

    asyncio.run(go())
    return read_metrics(Path(cfg.run.dir) / "metrics.jsonl")


def summarise(recs: list[dict]) -> dict:
    later = recs[1:] or recs  # the first step pays for CUDA's warm-up (kernels, allocator)
    out = {"steps": len(recs),
           "tokens_per_s": statistics.median(r["tokens_per_s"] for r in later),
           "gen_time_s": statistics.median(r["gen_time"] for r in later),
           "learn_time_s": statistics.median(r["learn_time"] for r in later),
           "step_time_s": statistics.median(r["step_time"] for r in later),
           "gen_wait_s": statistics.median(r.get("gen_wait", r["gen_time"]) for r in later),
           "staleness_max": max(r["staleness"] for r in recs),
           "micro_batch": recs[-1]["micro_batch"], "oom_halvings": sum(r["oom_halvings"] for r in recs),
           "gen_oom_halvings": sum(r["gen_oom_halvings"] for r in recs),
           "finite": all(isinstance(r["loss"], float) and r["loss"] == r["loss"] for r in recs),
           "reward_first": recs[0]["reward"], "reward_last": recs[-1]["reward"]}
    if "cuda_peak_mib" in recs[0]:
        out["peak_mib"] = max(r["cuda_peak_mib"] for r in recs)
        out["device_used_mib"] = max(r["cuda_device_used_mib"] for r in recs)  # every process on the card
    return out


def profile_for(cfg, device: str) -> dict:
    """The memory profile the node's ``--profile auto`` would choose here, and its estimate; and
    the estimate of what the runs below actually use (bf16, LoRA 16, checkpointing, the profile's
    micro-batch), which is what their measured peak is held to."""
    from dataclasses import replace

    from swarm_node.node.gpu.profiles import GiB, Settings, estimate, free_device_memory
    from swarm_node.node.gpu.select import plan_profile

    plan = plan_profile(cfg, "auto" if free_device_memory(device) else "24gb")
    m = cfg.model
    run = Settings(m.dtype, m.lora_rank, plan.settings.micro_batch, m.gradient_checkpointing,
                   cfg.generation.batch_size, cfg.generation.max_completion_length)
    est = estimate(plan.shape, run, replace(plan.workload, completion_tokens=cfg.generation.max_completion_length))
    return {"source": plan.source, "settings": plan.settings.describe(), "micro_batch": plan.settings.micro_batch,
            "estimated_peak_gib": round(plan.estimate.peak / GiB, 2),
            "estimated_learner_gib": round(plan.estimate.learner / GiB, 2),
            "run_settings": run.describe(), "run_estimated_peak_gib": round(est.peak / GiB, 2)}


def overlap_ratios(runs: dict) -> dict:
    """Each overlapped run's median step time over the synchronous run's max(generation,
    learning) (1.0 = fully hidden) and over its own step time (below 1 = faster)."""
    base = runs.get("mean", {})
    if "step_time_s" not in base:
        return {}
    floor = max(base["gen_time_s"], base["learn_time_s"])
    return {name: {"step_over_max_gen_learn": round(runs[name]["step_time_s"] / floor, 3),
                   "step_over_sync_step": round(runs[name]["step_time_s"] / base["step_time_s"], 3)}
            for name in ("overlap", "april", "overlap_april") if "step_time_s" in runs.get(name, {})}


def verdicts(report: dict) -> dict:
    """What the check must show, met or not (None: not measurable in this form)."""
    from swarm_node.node.gpu.profiles import MARGIN

    # The overlapped runs hold a second copy of the weights, which the memory profile does not
    # count (yet): their peaks are reported, not held to its estimate.
    peaks = [r["peak_mib"] / 1024 for name, r in report["runs"].items()
             if "peak_mib" in r and name not in ("overlap", "overlap_april")]
    limit = report["profile"]["run_estimated_peak_gib"] / (1 - MARGIN)  # the estimate, with the margin it plans
    return {"under_9_min": report["total_s"] < 540,
            "every_option_finite": all(r["finite"] and r["steps"] > 0 for r in report["runs"].values()),
            "peak_within_estimate": (max(peaks) <= limit) if peaks else None,
            "peak_gib_over_estimate": round(max(peaks) / report["profile"]["run_estimated_peak_gib"], 3) if peaks else None,
            "oom_recovered": report["oom_recovery"]["oom_halvings"] > 0 and report["oom_recovery"]["finite"]}


def oom_run(model: Path, work: Path, device: str, steps: int, quick: bool, measured_peak_mib: float | None = None) -> dict:
    """The whole batch in one learner pass on a card filled until it cannot fit: the node must
    halve its micro-batch and go on. With the peak a run of the same batch measured, the ballast
    leaves 40% of it free (the first H200 run sized it from a formula, left 5.9 GiB, and the
    whole batch fit: nothing was halved)."""
    import torch

    import swarm_node.policies.learner as learner_mod

    cfg = node_config(model, work / "oom", device, steps, quick, **{"learner.micro_batch_size": 0})
    # The whole batch in the learner's passes: rows of all-equal groups, which the node leaves out
    # (policies/inert_rows.py), would otherwise make the pass whatever size the rewards allow.
    learner_mod.skippable = lambda *a: False
    if device.startswith("cuda"):
        dev = torch.device(device)
        free, _ = torch.cuda.mem_get_info(dev)
        # Leave what weights, adapter, optimizer and a quarter-batch pass need: the whole batch's
        # logits (rows x tokens x 152k x ~10 B) cannot fit in that.
        rows = cfg.generation.prompts_per_step * cfg.group_size
        keep = (int(0.4 * measured_peak_mib * 2 ** 20) if measured_peak_mib else
                int(3 * 2 ** 30 + rows // 4 * cfg.generation.max_completion_length * QWEN05["vocab_size"] * 10))
        ballast = torch.empty(max(0, free - keep), dtype=torch.uint8, device=dev)
        try:
            recs = train(cfg)
        finally:
            del ballast
            torch.cuda.empty_cache()
        return {"mode": "real CUDA out-of-memory (ballast left %.1f GiB free)" % (keep / 2 ** 30), **summarise(recs)}
    from swarm_node.policies.policy import Policy

    real = Policy.completion_logprobs

    def tight(self, batch, temperature=1.0):  # --quick on a CPU: the error is injected
        if len(batch) > 4:
            raise torch.OutOfMemoryError("CUDA out of memory (injected: no GPU here)")
        return real(self, batch, temperature)

    Policy.completion_logprobs = tight
    try:
        recs = train(cfg)
    finally:
        Policy.completion_logprobs = real
    return {"mode": "injected (CPU)", **summarise(recs)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--device", default="cuda", help="torch device (cuda on the GPU machine)")
    ap.add_argument("--steps", type=int, default=6, help="steps per run (each option, and the out-of-memory run)")
    ap.add_argument("--quick", action="store_true", help="a tiny model and batch: the CPU form, for CI")
    ap.add_argument("--out", type=Path, default=Path("gpu_check.json"))
    ap.add_argument("--only", default="", help="comma-separated options to run (default: all, then the out-of-memory run)")
    args = ap.parse_args()
    import torch
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()
    if args.device.startswith("cuda") and not torch.cuda.is_available():
        sys.exit("gpu_check: no CUDA device here; use --device cpu --quick for the CPU form")
    t0 = time.time()
    report: dict = {"device": torch.cuda.get_device_name(0) if args.device.startswith("cuda") else "cpu",
                    "torch": torch.__version__, "shape": "tiny" if args.quick else "Qwen2.5-0.5B (random weights)"}
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        model = build_model(work / "model", TINY if args.quick else QWEN05, "bfloat16")
        report["build_s"] = round(time.time() - t0, 1)
        base = node_config(model, work / "probe", args.device, args.steps, args.quick)
        prof = profile_for(base, args.device)
        report["profile"] = prof
        micro = {"learner.micro_batch_size": prof["micro_batch"]}
        report["runs"] = {}
        only = set(filter(None, args.only.split(",")))
        for name, over in OPTIONS.items():
            if only and name not in only:
                continue
            t = time.time()
            try:
                recs = train(node_config(model, work / name, args.device, args.steps, args.quick, **micro, **over))
                report["runs"][name] = {**summarise(recs), "wall_s": round(time.time() - t, 1)}
            except Exception as e:  # noqa: BLE001 - one failing option must not hide the others' numbers
                report["runs"][name] = {"error": f"{type(e).__name__}: {e}", "steps": 0, "finite": False}
            print(f"gpu_check: {name}: {json.dumps(report['runs'][name])}", flush=True)
            write_json(args.out, report, end="")  # what finished survives a timeout
        report["overlap"] = overlap_ratios(report["runs"])
        report["oom_recovery"] = oom_run(model, work, args.device, max(2, args.steps // 2), args.quick,
                                         report["runs"].get("mean", {}).get("peak_mib"))
        print(f"gpu_check: out-of-memory run: {json.dumps(report['oom_recovery'])}", flush=True)
    report["total_s"] = round(time.time() - t0, 1)
    report["verdicts"] = verdicts(report)
    print(f"gpu_check: verdicts {json.dumps(report['verdicts'])}", flush=True)
    write_json(args.out, report, end="")
    print(f"gpu_check: wrote {args.out} in {report['total_s']} s")


if __name__ == "__main__":
    main()
