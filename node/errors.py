"""Errors the training node raises on purpose (bad config, unusable checkpoints, ...).

Everything here derives from ``protocol.errors.SwarmError`` through ``NodeError``, so the node's
entry point can report "bad input or environment" cleanly while real bugs still propagate.
"""

from swarm_node.protocol.errors import SwarmError

__all__ = ["CheckpointError", "CheckpointFormatError", "ConfigError", "NodeError"]


class NodeError(SwarmError):
    """Base class of every deliberate error raised by the ``node`` package."""


class ConfigError(NodeError):
    """The node's configuration is missing, malformed or inconsistent."""


class CheckpointError(NodeError):
    """A checkpoint cannot be written, or one on disk is missing, incomplete or corrupt."""


class CheckpointFormatError(CheckpointError):
    """A checkpoint in a format this version does not read (written by another version): kept
    on disk, never counted as corrupt."""
