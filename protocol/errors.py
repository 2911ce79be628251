"""Root of every error swarm-node raises on purpose.

It lives in ``protocol`` because that is the lowest layer: ``rewards``, ``policies`` and ``node``
may all import it, and it imports nothing. Each package keeps its own ``errors.py`` with a
subtree rooted here, so a caller can catch ``SwarmError`` for "bad input or environment" while
bugs (``TypeError``, ``AttributeError``...) still propagate.
"""

__all__ = ["SwarmError"]


class SwarmError(Exception):
    """Base class of every deliberate swarm-node error (bad input, config, checkpoint, ...)."""
