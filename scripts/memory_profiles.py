"""The memory profile table: what ``swarm-node join --profile`` picks for each card size.

    python scripts/memory_profiles.py            # rewrites docs/results/memory_profiles.md

For Qwen2.5 0.5B, 1.5B, 3B and 7B, and 64 completions a step (8 prompts × 8) of up to 128 prompt
+ 256 completion tokens: the settings ``node.gpu.profiles.choose_settings`` picks for 8, 12,
16, 24, 40 and 80 GB, their estimated peak, and the share a vLLM engine beside the learner would
need. Estimates, not measurements: tests/node/gpu/test_memory_profile.py checks the activation term
against what autograd keeps for Qwen2 models on the CPU; the peak on a GPU is what
scripts/gpu_check.sh measures where a GPU is lent.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from swarm_node.node.gpu.profiles import GiB, PROFILES, QWEN25, NoFit, Workload, choose_settings, largest_class  # noqa: E402

WORKLOAD = Workload(rows=64, prompt_tokens=128, completion_tokens=256)
MODELS = ("0.5B", "1.5B", "3B", "7B")
OUT = Path(__file__).resolve().parents[1] / "docs" / "results" / "memory_profiles.md"


def table() -> str:
    rows = ["| card | model | weights, training | micro-batch | grad. ckpt | gen. batch | tokens | est. peak | vLLM share |",
            "|---|---|---|---|---|---|---|---|---|"]
    for name, gb in PROFILES.items():
        for model in MODELS:
            try:
                s, e = choose_settings(QWEN25[model], gb * GiB, WORKLOAD)
            except NoFit:
                rows.append(f"| {name} | {model} | does not fit | | | | | | |")
                continue
            train = f"{s.dtype}, LoRA r{s.lora_rank}" if s.lora_rank else f"{s.dtype}, full"
            rows.append(f"| {name} | {model} | {train} | {s.micro_batch} | {'on' if s.gradient_checkpointing else 'off'} "
                        f"| {s.generation_batch} | {s.max_completion_length} | {e.peak / GiB:.1f} GiB "
                        f"| {e.vllm_share:.2f} |")
    largest = ", ".join(f"{name}: {largest_class(gb * GiB, WORKLOAD) or 'none'}" for name, gb in PROFILES.items())
    return "\n".join(rows) + f"\n\nLargest Qwen2.5 size at the full 256 tokens: {largest}.\n"


def main() -> None:
    OUT.write_text(
        "# Memory profiles\n\n"
        "What `swarm-node join --profile <card>` (or `--profile auto` on a CUDA device, from its free memory) "
        "picks, for 64 completions a step (8 prompts x 8) of up to 128 prompt + 256 completion tokens. "
        "Written by `python scripts/memory_profiles.py`; `tests/node/gpu/test_memory_profile.py` fails when this "
        "table and the code disagree.\n\n"
        "These are **estimates** (node/gpu/profiles.py, a sum of named terms with a 15% margin and 0.6 GiB "
        "for CUDA's context), not measurements on a GPU: no GPU was lent to this work. The activation term is "
        "checked against the bytes autograd keeps for Qwen2 models on the CPU (within 20-25%, "
        "tests/node/gpu/test_memory_profile.py).\n\n"
        "Full fine-tuning runs in float32 (AdamW on bf16 weights drops updates below bf16's resolution); with "
        "bf16 the base is frozen and a LoRA adapter trains in float32. Where nothing fits at 256 tokens, the "
        "completion length is halved until it does (`tokens`). The vLLM share is the `gpu_memory_utilization` a "
        "vLLM engine beside the learner would need (its own weights copy, the step's KV cache, 0.5 GiB).\n\n"
        + table())
    print(f"wrote {OUT}")


if __name__ == "__main__":
    main()
