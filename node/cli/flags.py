"""Config overrides from the command line: ``--section.key value`` flags turned into config keys.

The commands that run a node (train, join, sim, adversary) take every config field as a flag; the
ones the parser does not know are passed on too, so config validation rejects them with the
valid keys listed.
"""

from __future__ import annotations

import argparse

from swarm_node.node.errors import ConfigError
from swarm_node.node.config.config import parse_flag_value, string_keys


def overrides(ns: argparse.Namespace, unknown: list[str]) -> dict:
    """Config overrides from the known flags, plus unknown ``--section.key value`` pairs, which
    are passed on so config validation rejects them with the valid keys listed."""
    verbatim = string_keys()

    def value_of(key: str, text: str):
        return text if key in verbatim else parse_flag_value(text)

    out = {k: value_of(k, v) for k, v in vars(ns).items() if "." in k}
    it = iter(unknown)
    for arg in it:
        if not (arg.startswith("--") and "." in arg):
            raise ConfigError(f"unrecognized argument {arg!r} (see swarm-node train --help)")
        key, eq, value = arg[2:].partition("=")
        if not eq:
            value = next(it, None)
            if value is None:
                raise ConfigError(f"flag {arg} needs a value")
        out[key] = value_of(key, value)
    return out


def raw_flags(unknown: list[str]) -> dict[str, str]:
    """``--section.key value`` pairs as written (``overrides`` has already checked their form)."""
    out, it = {}, iter(unknown)
    for arg in it:
        key, eq, value = arg[2:].partition("=")
        out[key] = value if eq else next(it)
    return out


def flat_keys(toml: dict) -> set[str]:
    """The ``section.key`` names a config file sets."""
    return {f"{section}.{key}" for section, table in toml.items() if isinstance(table, dict) for key in table}
