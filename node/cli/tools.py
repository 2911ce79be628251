"""The one-shot commands that print what they made: ``id``, ``build-model`` and ``plot``."""

from __future__ import annotations

import argparse

from swarm_node.node.errors import ConfigError, NodeError


def run_id(args: argparse.Namespace, unknown: list[str]) -> int:
    """Print the node's peer id, making its key first if it has none."""
    from swarm_node.node.observe.logs import setup_logging

    setup_logging()
    from swarm_node.protocol.identity import load_or_create_identity

    print(load_or_create_identity(args.identity or args.run_dir / "identity.pem").peer_id)
    return 0


def run_build_model(args: argparse.Namespace, unknown: list[str]) -> int:
    """Build, fetch or convert (or find in the cache) a model the node makes itself; print where it is."""
    from swarm_node.node.observe.logs import setup_logging

    setup_logging()
    from swarm_node.policies.errors import ModelSourceError
    from swarm_node.policies.model_source import BUILT_HERE, model_kind, resolve_model

    try:
        kind = model_kind(args.name)
        if kind not in BUILT_HERE:
            what = {"hub": "a hub id", "folder": "a model folder"}[kind]
            raise ConfigError(f"build-model {args.name}: {what} is loaded as it is, there is nothing to build; "
                              f"pass default, a registry model or a .gguf file")
        if args.out:
            if kind != "default":
                raise ConfigError("build-model --out writes the embedded default model only; other models are "
                                  "cached under $SWARM_NODE_HOME/models (swarm-node export writes a trained one)")
            from swarm_node.policies.default_model import build_default_model

            path = build_default_model(args.out)
        else:
            path = resolve_model(args.name).path
    except ModelSourceError as e:
        raise ConfigError(str(e)) from None
    print(path)
    return 0


def run_plot(args: argparse.Namespace, unknown: list[str]) -> int:
    """Redraw a run folder's (or a sim folder's) plots; print each one's path."""
    from swarm_node.node.observe.logs import setup_logging

    setup_logging()
    from swarm_node.node.observe.plots import plot_folder

    try:
        for path in plot_folder(args.run_dir):
            print(path)
    except NodeError as e:  # a folder that is not a run: the user's input, not a failure
        raise ConfigError(str(e)) from None
    return 0
