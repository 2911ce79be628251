"""A node that generates with an older copy of its policy (``train.behaviour_lag``): stale-node
experiments, where the behaviour policy μ that samples is ``lag`` updates behind the learner.

With lag 0 (every real run) the live policy generates and nothing is copied.
"""

from __future__ import annotations

import collections
import copy

from swarm_node.policies.policy import Policy

__all__ = ["LaggedBehaviour"]


class LaggedBehaviour:
    """Generates with a copy of the policy ``lag`` updates old.

    Keeps the last lag+1 weight snapshots on the CPU; generation loads the oldest into a second
    model instance.
    """

    def __init__(self, policy: Policy, lag: int, version: int):
        self.lag = lag
        self.policy = policy
        self.snapshots: collections.deque = collections.deque(maxlen=lag + 1)
        self.behaviour = None
        if lag > 0:
            self.behaviour = Policy(copy.deepcopy(policy.model), policy.tokenizer, policy.name)
            self.behaviour.prompt_format = policy.prompt_format  # it samples the same prompts
            self.push(version)  # after a resume the buffer restarts from the resumed weights

    def push(self, version: int) -> None:
        if self.lag > 0:
            state = {k: v.detach().to("cpu", copy=True) for k, v in self.policy.model.state_dict().items()}
            self.snapshots.append((version, state))

    def sampler(self) -> tuple[Policy, int]:
        if self.lag == 0:
            return self.policy, -1
        version, state = self.snapshots[0]
        self.behaviour.model.load_state_dict(state)
        return self.behaviour, version
