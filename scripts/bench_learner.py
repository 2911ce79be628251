"""What do the off-policy corrections cost? A corrected learner step vs a plain GRPO step.

    python scripts/bench_learner.py                       # embedded default model, 30 rounds, 1 thread
    python scripts/bench_learner.py --threads 0 --tag threads-default   # torch's default threads
    python scripts/bench_learner.py --model PATH --repeats 30 --device cpu --out docs/results

Batch: ``--prompts`` (8) real task prompts x ``--generations`` (8) completions sampled by the
policy *as it was two updates ago* (the behaviour policy), with its behaviour log-probs and locally
computed rewards; the learner's policy is that copy after two more corrected updates, so token
ratios and sequence weights are not all 1 and the trust region and ESS actually do work.

Variants, all on the same batch and starting from the same weights and AdamW state every repeat
(both restored from one snapshot before each timed step, outside the timer):

- ``plain``: a minimal GRPO step written here, independent of ``policies.learner``: build the
  TokenBatch, group-mean advantages, one forward with grad via ``policy.completion_logprobs``,
  ratio against the detached current log-probs, PPO-clipped surrogate (ε = 0.2), per-sequence
  token mean then batch mean, backward, ``clip_grad_norm_``, AdamW step.
- ``corrected``: ``Learner.step`` with the node's default config (``node.run.trainer.build_learner``
  on ``NodeConfig()``): token ratios against the behaviour log-probs with the asymmetric clip and
  the ratio clamp δ, truncated sequence weights, ESS, the VCPO learning-rate factor, metrics.
- ``opob_approx``: the same with ``learner.baseline = "opob_approx"``.
- ``m2po``: the same with ``learner.m2po_tau = 0.04`` (M2PO token mask instead of clipping).

Timing: ``--warmup`` untimed rounds, then ``--repeats`` rounds; each round runs every variant once,
the order rotated from round to round (A B C D, B C D A, ...) so that neither machine load drift
nor cache warmth favours one variant. ``torch.manual_seed`` is reset before every step. Reported:
the median step time per variant and the ratio of medians against ``plain`` (target for
``corrected``: <= 1.05), plus the median of the per-round paired ratios.

Threads: one torch thread by default. On a small shared machine (2 cores, other jobs running),
multi-threaded CPU kernels oversubscribe the cores and step times swing by several x from one step
to the next, which drowns the few-percent difference being measured; a single thread keeps the
comparison stable. ``--threads 0`` keeps torch's default (what ``swarm-node train`` uses).

Writes ``bench_learner[-TAG].json`` and ``bench_learner[-TAG].md`` into ``--out`` and prints the
table.
"""

from __future__ import annotations

import argparse
import copy
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import torch  # noqa: E402

from swarm_node.node.config.config import NodeConfig, load_config  # noqa: E402
from swarm_node.node.run.rollouts import generate_rollouts, round_task_ids, to_train_samples  # noqa: E402
from swarm_node.node.run.wiring import build_learner  # noqa: E402
from swarm_node.policies.learner import TrainSample  # noqa: E402
from swarm_node.policies.policy import Policy, SamplingParams, TokenBatch  # noqa: E402
from swarm_node.rewards.scoring import RewardConfig  # noqa: E402
from common.flags import add_common_args, setup  # noqa: E402
from common.report import command_line, environment, write_bench_report  # noqa: E402

PLAIN_EPSILON = 0.2


def plain_grpo_step(policy: Policy, optimizer: torch.optim.Optimizer, params: list[torch.Tensor],
                    samples: list[TrainSample], temperature: float, max_grad_norm: float) -> float:
    """A faithful minimal GRPO update (on-policy form: ratio against the detached current π_θ)."""
    pad = int(policy.tokenizer.pad_token_id)
    batch = TokenBatch.build([s.prompt_ids for s in samples], [s.completion_ids for s in samples], pad)
    rewards = torch.tensor([s.reward for s in samples], dtype=torch.float32)
    groups = {g: i for i, g in enumerate(dict.fromkeys(s.group for s in samples))}
    gids = torch.tensor([groups[s.group] for s in samples])
    n_groups = len(groups)
    group_sum = torch.zeros(n_groups).index_add_(0, gids, rewards)
    group_n = torch.zeros(n_groups).index_add_(0, gids, torch.ones_like(rewards))
    adv = (rewards - (group_sum / group_n)[gids]).unsqueeze(-1)  # (B, 1)

    policy.model.train()
    logp = policy.completion_logprobs(batch, temperature)  # (B, T), one forward with grad
    mask = batch.completion_mask
    ratio = torch.exp(logp - logp.detach())
    surrogate = torch.minimum(ratio * adv,
                              torch.clamp(ratio, 1 - PLAIN_EPSILON, 1 + PLAIN_EPSILON) * adv)
    per_seq = (surrogate * mask).sum(-1) / mask.sum(-1).clamp(min=1)
    loss = -per_seq.mean()
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(params, max_grad_norm)
    optimizer.step()
    return float(loss.detach())


def make_batch(policy_path: str, device: str, prompts: int, generations: int, max_new: int,
               lag: int, seed: int) -> tuple[Policy, list[TrainSample]]:
    """(learner policy, a batch sampled by the same policy ``lag`` corrected updates earlier)."""
    cfg = load_config(overrides={"generation.num_generations": generations,
                                 "generation.prompts_per_step": prompts,
                                 "generation.max_completion_length": max_new})
    params = SamplingParams(max_new_tokens=max_new, temperature=cfg.generation.temperature)
    rcfg = RewardConfig(format_weight=cfg.tasks.format_weight)

    def rollouts(policy: Policy, step: int):
        torch.manual_seed(seed + step)
        ids = round_task_ids(seed, step, prompts, cfg.tasks.names, cfg.tasks.difficulties)
        return generate_rollouts(policy, ids, generations, params, 0, rcfg)

    policy = Policy.load(policy_path, device=device)
    behaviour = Policy(copy.deepcopy(policy.model), policy.tokenizer, policy.name)  # frozen here: the older copy
    learner = build_learner(policy, cfg)
    for step in range(lag):  # the learner's policy moves ``lag`` updates ahead on its own data
        learner.step(to_train_samples(rollouts(policy, step)))
    return policy, to_train_samples(rollouts(behaviour, 1000))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_common_args(ap)
    ap.add_argument("--lag", type=int, default=2, help="updates between behaviour and learner policy")
    args = ap.parse_args()
    setup(args)
    cuda = args.device.startswith("cuda")

    policy, samples = make_batch(args.model, args.device, args.prompts, args.generations,
                                 args.max_new_tokens, args.lag, args.seed)
    base = NodeConfig()
    temperature = base.generation.temperature
    learners = {
        "corrected": build_learner(policy, base),
        "opob_approx": build_learner(policy, load_config(overrides={"learner.baseline": "opob_approx"})),
        "m2po": build_learner(policy, load_config(overrides={"learner.m2po_tau": 0.04})),
    }
    params = learners["corrected"].params
    plain_opt = torch.optim.AdamW(params, lr=base.learner.learning_rate,
                                  weight_decay=base.learner.weight_decay)

    # One shared starting point: weights + AdamW state after one step (steady-state optimizer,
    # with exp_avg buffers already allocated), restored before every timed step.
    learners["corrected"].step(samples)
    w0 = copy.deepcopy(policy.model.state_dict())
    opt0 = copy.deepcopy(learners["corrected"].optimizer.state_dict())
    optimizers = {name: lrn.optimizer for name, lrn in learners.items()} | {"plain": plain_opt}

    def restore(name: str) -> None:
        policy.model.load_state_dict(w0)
        optimizers[name].load_state_dict(copy.deepcopy(opt0))

    first_metrics: dict[str, dict] = {}

    def run(name: str) -> float:
        restore(name)
        torch.manual_seed(args.seed)
        if cuda:
            torch.cuda.synchronize()
        t0 = time.perf_counter()
        if name == "plain":
            plain_grpo_step(policy, plain_opt, params, samples, temperature,
                            base.learner.max_grad_norm)
        else:
            m = learners[name].step(samples)
            first_metrics.setdefault(name, m)
        if cuda:
            torch.cuda.synchronize()
        return time.perf_counter() - t0

    names = ["plain", "corrected", "opob_approx", "m2po"]
    times: dict[str, list[float]] = {n: [] for n in names}
    for r in range(args.warmup + args.repeats):
        order = names[r % len(names):] + names[:r % len(names)]
        for n in order:
            t = run(n)
            if r >= args.warmup:
                times[n].append(t)

    med = {n: statistics.median(v) for n, v in times.items()}
    paired = {n: statistics.median(a / b for a, b in zip(times[n], times["plain"])) for n in names}
    tokens = int(sum(len(s.completion_ids) for s in samples))
    m = first_metrics["corrected"]
    result = {
        "benchmark": "learner step: corrected vs plain GRPO",
        "command": command_line(),
        "model": args.model,
        "n_params": sum(p.numel() for p in policy.model.parameters()),
        "device": args.device,
        "torch_threads": torch.get_num_threads(),
        "batch": {"prompts": args.prompts, "generations": args.generations, "rows": len(samples),
                  "completion_tokens": tokens, "max_new_tokens": args.max_new_tokens,
                  "behaviour_lag_updates": args.lag},
        "corrected_step_on_this_batch": {k: m[k] for k in ("rho", "lr_factor", "clip_frac",
                                                           "ratio_mean", "weight_mean") if k in m},
        "warmup": args.warmup, "repeats": args.repeats,
        "median_s": med,
        "ratio_of_medians_vs_plain": {n: med[n] / med["plain"] for n in names},
        "median_paired_ratio_vs_plain": paired,
        "target": "corrected / plain <= 1.05",
        "target_met": med["corrected"] / med["plain"] <= 1.05,
        "times_s": times,
        **environment(),
    }
    md = [
        "# Learner step: corrected vs plain GRPO",
        "",
        f"`{result['command']}`",
        "",
        f"Model `{Path(args.model).name}` ({result['n_params'] / 1e6:.2f}M params) on {args.device}, "
        f"{result['torch_threads']} torch threads; batch {args.prompts} prompts x "
        f"{args.generations} generations ({tokens} completion tokens), behaviour policy "
        f"{args.lag} updates old (first corrected step: rho = {m.get('rho', float('nan')):.3f}, "
        f"clip_frac = {m.get('clip_frac', float('nan')):.3f}). {args.warmup} warm-up + "
        f"{args.repeats} interleaved rounds, same start weights and AdamW state every step; "
        f"load average at the end {result['load_avg_1m']:.2f}.",
        "",
        "| variant | median step (ms) | p25-p75 (ms) | ratio of medians vs plain | median paired ratio |",
        "|---|---:|---:|---:|---:|",
    ]
    for n in names:
        q = statistics.quantiles(times[n], n=4)
        md.append(f"| {n} | {med[n] * 1e3:.1f} | {q[0] * 1e3:.1f}-{q[2] * 1e3:.1f} | "
                  f"{med[n] / med['plain']:.3f} | {paired[n]:.3f} |")
    md += ["", f"Target: corrected / plain <= 1.05 -> "
               f"{'met' if result['target_met'] else 'NOT met'} "
               f"({med['corrected'] / med['plain']:.3f})."]
    write_bench_report(args.out, "bench_learner" + (f"-{args.tag}" if args.tag else ""), result, md, times)
    return 0


if __name__ == "__main__":
    sys.exit(main())
