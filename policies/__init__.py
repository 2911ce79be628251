"""The policy and the learner of a node, ``swarm_node.policies``.

policy.py              Policy: any HF causal LM + tokenizer; sampling with behaviour log-probs,
                       batched log-prob recompute (TokenBatch), fingerprints
sampling.py            what generation samples from and the log-probs it records: a logits
                       processor keeping B floats a step; settings that change the draw switched off
prompt_format.py       a question as the policy sees it: the raw template or the model's chat
                       template; the format folded into the rollout fingerprint
partial_generation.py  APRIL's partial rollouts, policy side: rows stopped early, continued later
halt.py                a generation stopped at the next token when asked (GenerationStopped)
merged_sampler.py      a LoRA policy's sampler: the adapter folded into a copy of the base weights
vllm_backend.py        the vLLM generation backend: the same rollouts, the weights synced in place
vllm_worker.py         runs in vLLM's worker process: loads the trainer's new weights from a file
token_batch.py         TokenBatch: prompt and completion rows laid out for one forward pass
token_logprobs.py      each target token's log-prob without a (rows, vocabulary) float32 tensor
micro_batches.py       which rows go through the model together: the learner's passes, longest
                       first under a token budget; generation's prompts longest first (pure)
inert_rows.py          rows of groups with equal rewards (no gradient), left out of the passes
oom.py                 out-of-memory recovery: work retried at half the rows, OutOfMemory at one row
weight_state.py        the weights as a broadcast version's bytes; applied checked and atomically
model_source.py        what ``model.name`` names (default, registry model, .gguf, folder, hub id),
                       resolved to something ``Policy.load`` reads, or a ModelSourceError
registry_models.py     pretrained models installed from the package registry, pinned by sha256
gguf_convert.py        a GGUF file converted to a plain Hugging Face model folder
model_cache.py         the local model cache: folders built once, whole or not at all, under a lock
default_model.py       the embedded default model: local tokenizer + small Qwen2 + warm start, cached
offpolicy.py           pure maths: token ratios, truncated sequence weights, ESS, LR factor, M2PO mask
advantages.py          pure maths: group advantages with mean / median (MC-GRPO) / OPOB baselines
loss.py                pure maths: the corrected GRPO policy loss and its trust regions
supervised.py          pure maths: the supervised term on peers' verified successes (learner.peer_sft_coef)
learner.py             Learner: one optimizer update from a batch of TrainSamples
errors.py              PolicyError; ModelSourceError (a model name that names nothing)
"""
