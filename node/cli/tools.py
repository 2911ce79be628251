"""The one-shot commands that print what they made: ``id``, ``build-model`` and ``plot``."""

from __future__ import annotations

import argparse

from node.errors import ConfigError, NodeError


def run_id(args: argparse.Namespace, unknown: list[str]) -> int:
    """Print the node's peer id, making its key first if it has none."""
    from node.observe.logs import setup_logging

    setup_logging()
    from protocol.identity import load_or_create_identity

    print(load_or_create_identity(args.identity or args.run_dir / "identity.pem").peer_id)
    return 0


def run_build_model(args: argparse.Namespace, unknown: list[str]) -> int:
    """Build (or find in the cache) the embedded default model; print where it is."""
    from node.observe.logs import setup_logging

    setup_logging()
    from policies.default_model import build_default_model, ensure_default_model

    path = build_default_model(args.out) if args.out else ensure_default_model()
    print(path)
    return 0


def run_plot(args: argparse.Namespace, unknown: list[str]) -> int:
    """Redraw a run folder's (or a sim folder's) plots; print each one's path."""
    from node.observe.logs import setup_logging

    setup_logging()
    from node.observe.plots import plot_folder

    try:
        for path in plot_folder(args.run_dir):
            print(path)
    except NodeError as e:  # a folder that is not a run: the user's input, not a failure
        raise ConfigError(str(e)) from None
    return 0
