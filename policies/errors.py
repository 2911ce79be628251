"""Errors of the policy layer (model loading, generation, the learner)."""

from swarm_node.protocol.errors import SwarmError

__all__ = ["PolicyError", "ModelSourceError"]


class PolicyError(SwarmError):
    """A model or tokenizer cannot be loaded or used as configured."""


class ModelSourceError(PolicyError):
    """``model.name`` names nothing that can be had: a missing path, a folder that is not a model,
    an unknown registry model, a download or digest that failed. The user's input (exit 2)."""
