"""What does ``Policy.generate`` cost over a bare ``model.generate``? Tokens/s, side by side.

    python scripts/bench_generation.py                    # embedded default model, 30 rounds, 1 thread
    python scripts/bench_generation.py --threads 0 --tag threads-default   # torch's default threads
    python scripts/bench_generation.py --model PATH --repeats 30 --device cpu --out docs/results

Batch: ``--prompts`` (8) real task prompts x ``--generations`` (8) samples each, temperature 1,
top-p 1, top-k off (the node's defaults), ``--max-new-tokens`` (16).

- ``policy``: ``Policy.generate(prompts, G, params)``, everything a node pays for a round:
  tokenizing the prompts, building the left-padded batch, sampling with the behaviour log-prob
  recorder (policies/sampling.py: each sampled token's temperature-scaled log-prob, gathered step
  by step, never the logits of every step), EOS truncation, and decoding 64 texts.

Peak memory, the same side by side on a real (152k-token) vocabulary, is
scripts/bench_generation_memory.py's (one process per variant, so each peak is its own).
- ``bare``: ``model.generate(input_ids, attention_mask, do_sample=True, same temperature / top_p /
  top_k / max_new_tokens / eos / pad)`` on the same pre-tokenized, pre-padded batch (built once,
  outside the timer), returning only the token tensor: no logits, no log-probs, no decoding.

Fair work: both calls are preceded by the same ``torch.manual_seed``, and the bare call's
sampling consumes random numbers exactly as ``Policy.generate``'s does, so the two draw *the same
tokens* (the script checks this for every round). Each variant therefore generates the same
completions with the same number of decoding steps, and tokens/s counts only real generated
tokens, up to and including each row's first EOS, identically for both. Forcing
``min_new_tokens = max_new_tokens`` would also equalise the work, but it changes the sampling
distribution (EOS suppressed by a logits processor the behaviour log-probs do not see) and times a
workload the node never runs; matching the samples measures the real one exactly.

Timing: ``--warmup`` untimed rounds, then ``--repeats`` rounds alternating the two variants
(policy, bare, then bare, policy, ...), each with a fresh seed per round shared by both. Reported:
median tokens/s per variant, the ratio of medians (target ``policy / bare >= 0.9``) and the
median of the per-round paired ratios. One torch thread by default (see
``scripts/bench_learner.py``: on a small shared machine oversubscribed threads make timings swing
by several x); ``--threads 0`` keeps torch's default.

Writes ``bench_generation[-TAG].json`` and ``bench_generation[-TAG].md`` into ``--out`` and prints
the table.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import torch  # noqa: E402

from swarm_node.node.config.config import NodeConfig  # noqa: E402
from swarm_node.node.run.rollouts import round_task_ids  # noqa: E402
from swarm_node.policies.policy import Policy, SamplingParams, TokenBatch  # noqa: E402
from swarm_node.rewards.registry import make_task  # noqa: E402
from common.flags import add_common_args, setup  # noqa: E402
from common.report import command_line, environment, write_bench_report  # noqa: E402


def generated_tokens(new: torch.Tensor, eos: int) -> int:
    """Tokens up to and including each row's first EOS (all of them when a row has none)."""
    is_eos = new == eos
    first = torch.where(is_eos.any(-1), is_eos.int().argmax(-1) + 1, new.shape[1])
    return int(first.sum())


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_common_args(ap)
    args = ap.parse_args()
    setup(args)
    cuda = args.device.startswith("cuda")

    cfg = NodeConfig()
    policy = Policy.load(args.model, device=args.device)
    model, tok = policy.model, policy.tokenizer
    model.eval()
    task_ids = round_task_ids(args.seed, 0, args.prompts, cfg.tasks.names, cfg.tasks.difficulties)
    prompts = [make_task(t).prompt for t in task_ids]
    G = args.generations
    params = SamplingParams(max_new_tokens=args.max_new_tokens, temperature=cfg.generation.temperature,
                            top_p=cfg.generation.top_p, top_k=cfg.generation.top_k)
    eos, pad = policy.eos_token_id, int(tok.pad_token_id)

    # The bare call's input: the same left-padded rows Policy.generate builds, made once.
    rows = [p for p in policy.encode_prompts(prompts) for _ in range(G)]
    batch = TokenBatch.build(rows, [()] * len(rows), pad)
    P = batch.prompt_len
    input_ids = batch.input_ids[:, :P].to(policy.device)
    attention_mask = batch.attention_mask[:, :P].to(policy.device)

    def run_policy() -> tuple[float, int, list[tuple[int, ...]]]:
        if cuda:
            torch.cuda.synchronize()
        t0 = time.perf_counter()
        groups = policy.generate(prompts, G, params)
        dt = time.perf_counter() - t0
        comps = [c.completion_ids for g in groups for c in g]
        return dt, sum(len(c) for c in comps), comps

    @torch.no_grad()
    def run_bare() -> tuple[float, int, list[tuple[int, ...]]]:
        if cuda:
            torch.cuda.synchronize()
        t0 = time.perf_counter()
        seqs = model.generate(input_ids=input_ids, attention_mask=attention_mask, do_sample=True,
                              temperature=params.temperature, top_p=params.top_p,
                              top_k=params.top_k, max_new_tokens=params.max_new_tokens,
                              eos_token_id=eos, pad_token_id=pad)
        new = seqs[:, P:]
        if cuda:
            torch.cuda.synchronize()
        dt = time.perf_counter() - t0
        n = generated_tokens(new.cpu(), eos)
        comps = []
        for row in new.cpu().tolist():
            k = row.index(eos) + 1 if eos in row else len(row)
            comps.append(tuple(row[:k]))
        return dt, n, comps

    variants = {"policy": run_policy, "bare": run_bare}
    times: dict[str, list[float]] = {"policy": [], "bare": []}
    tokens: dict[str, list[int]] = {"policy": [], "bare": []}
    mismatches = 0
    for r in range(args.warmup + args.repeats):
        order = ["policy", "bare"] if r % 2 == 0 else ["bare", "policy"]
        got = {}
        for name in order:
            torch.manual_seed(args.seed + 1 + r)  # both variants draw the same samples
            got[name] = variants[name]()
        mismatches += got["policy"][2] != got["bare"][2]
        if r >= args.warmup:
            for name in order:
                times[name].append(got[name][0])
                tokens[name].append(got[name][1])

    tps = {n: [k / t for k, t in zip(tokens[n], times[n])] for n in times}
    med_tps = {n: statistics.median(v) for n, v in tps.items()}
    med_s = {n: statistics.median(v) for n, v in times.items()}
    paired = statistics.median(a / b for a, b in zip(tps["policy"], tps["bare"]))
    ratio = med_tps["policy"] / med_tps["bare"]
    result = {
        "benchmark": "generation throughput: Policy.generate vs bare model.generate",
        "command": command_line(),
        "model": args.model,
        "n_params": sum(p.numel() for p in model.parameters()),
        "device": args.device,
        "torch_threads": torch.get_num_threads(),
        "batch": {"prompts": args.prompts, "generations": G, "rows": len(rows),
                  "max_new_tokens": args.max_new_tokens, "prompt_len_padded": P},
        "sampling": {"temperature": params.temperature, "top_p": params.top_p, "top_k": params.top_k},
        "work": "same seed -> identical samples; tokens counted up to and including the first EOS",
        "identical_samples_all_rounds": mismatches == 0,
        "rounds_with_different_samples": mismatches,
        "median_generated_tokens": statistics.median(tokens["policy"]),
        "warmup": args.warmup, "repeats": args.repeats,
        "median_tokens_per_s": med_tps,
        "median_s": med_s,
        "ratio_of_medians_policy_vs_bare": ratio,
        "median_paired_ratio_policy_vs_bare": paired,
        "target": "policy / bare >= 0.9",
        "target_met": ratio >= 0.9,
        "times_s": times, "tokens": tokens,
        **environment(),
    }
    md = [
        "# Generation: Policy.generate vs bare model.generate",
        "",
        f"`{result['command']}`",
        "",
        f"Model `{Path(args.model).name}` ({result['n_params'] / 1e6:.2f}M params) on {args.device}, "
        f"{result['torch_threads']} torch threads; {args.prompts} prompts x {G} generations, "
        f"max_new_tokens {args.max_new_tokens}, temperature {params.temperature}. Same seed per "
        f"round for both variants: identical samples in "
        f"{args.warmup + args.repeats - mismatches}/{args.warmup + args.repeats} rounds; tokens "
        f"counted up to the first EOS (median {result['median_generated_tokens']} per round). "
        f"{args.warmup} warm-up + {args.repeats} alternating rounds; load average at the end "
        f"{result['load_avg_1m']:.2f}.",
        "",
        "| variant | median tokens/s | median round (ms) | p25-p75 tokens/s | ratio vs bare |",
        "|---|---:|---:|---:|---:|",
    ]
    for n in ("bare", "policy"):
        q = statistics.quantiles(tps[n], n=4)
        md.append(f"| {n} | {med_tps[n]:.0f} | {med_s[n] * 1e3:.1f} | {q[0]:.0f}-{q[2]:.0f} | "
                  f"{med_tps[n] / med_tps['bare']:.3f} |")
    md += ["", f"Median paired ratio policy / bare: {paired:.3f}. Target policy / bare >= 0.9 -> "
               f"{'met' if result['target_met'] else 'NOT met'} ({ratio:.3f})."]
    write_bench_report(args.out, "bench_generation" + (f"-{args.tag}" if args.tag else ""), result, md, times)
    return 0


if __name__ == "__main__":
    sys.exit(main())
