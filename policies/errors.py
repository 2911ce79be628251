"""Errors of the policy layer (model loading, generation, the learner)."""

from protocol.errors import SwarmError

__all__ = ["PolicyError"]


class PolicyError(SwarmError):
    """A model or tokenizer cannot be loaded or used as configured."""
