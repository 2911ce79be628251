"""The policy and the learner of a node, ``swarm_node.policies``.

policy.py         Policy: any HF causal LM + tokenizer; sampling with behaviour log-probs,
                  batched log-prob recompute (TokenBatch), fingerprints
default_model.py  the embedded default model: local tokenizer + small Qwen2 + warm start, cached
offpolicy.py      pure maths: token ratios, truncated sequence weights, ESS, LR factor, M2PO mask
advantages.py     pure maths: group advantages with mean / median (MC-GRPO) / OPOB baselines
loss.py           pure maths: the corrected GRPO policy loss and its trust regions
learner.py        Learner: one optimizer update from a batch of TrainSamples
errors.py         PolicyError
"""
