"""The entry point: parse the command line, run the command's function, turn errors into exit codes.

``COMMANDS`` maps each command to the function that runs it; every function takes the parsed
arguments and the flags the parser left (``--section.key value`` config overrides, for the
commands that take them) and returns the exit code.
"""

from __future__ import annotations

import argparse
import logging
import signal
import sys
import traceback
from dataclasses import dataclass
from typing import Callable

from swarm_node.node.cli.adversary import run_adversary
from swarm_node.node.cli.bootstrap import run_bootstrap
from swarm_node.node.cli.doctor.command import run_doctor
from swarm_node.node.cli.eval import run_eval
from swarm_node.node.cli.export import run_export
from swarm_node.node.cli.parser import build_parser
from swarm_node.node.cli.sim import run_sim_worker, run_simulation
from swarm_node.node.cli.tools import run_build_model, run_id, run_plot
from swarm_node.node.cli.train import run_join, run_train
from swarm_node.node.errors import ConfigError
from swarm_node.protocol.errors import SwarmError

log = logging.getLogger("swarm_node")


@dataclass(frozen=True)
class Command:
    run: Callable[[argparse.Namespace, list[str]], int]
    config_flags: bool = False  # takes --section.key flags the parser does not know (config overrides)


COMMANDS: dict[str, Command] = {
    "train": Command(run_train, config_flags=True),
    "join": Command(run_join, config_flags=True),
    "doctor": Command(run_doctor, config_flags=True),
    "bootstrap": Command(run_bootstrap),
    "sim": Command(run_simulation, config_flags=True),
    "adversary": Command(run_adversary, config_flags=True),
    "sim-worker": Command(run_sim_worker, config_flags=True),
    "id": Command(run_id),
    "build-model": Command(run_build_model),
    "plot": Command(run_plot),
    "eval": Command(run_eval),
    "export": Command(run_export),
}


def main(argv: list[str] | None = None) -> int:
    from swarm_node.node.daemon_thread import exit_if_work_abandoned, work_abandoned

    # A shell starts a background job ('swarm-node train &' from a script) with SIGINT ignored,
    # and asyncio.run then leaves it so: a Ctrl-C or `kill -INT` during start-up would be lost,
    # while the running node (loop.add_signal_handler) stops on it. One behaviour: it stops.
    if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        rc = _main(argv)
    except BaseException:
        if work_abandoned():  # report it, then leave without finalizing under the thread
            traceback.print_exc()
            exit_if_work_abandoned(1)
        raise
    exit_if_work_abandoned(rc)  # a Ctrl-C left a model build running: do not finalize under it
    return rc


def _main(argv: list[str] | None) -> int:
    parser = build_parser()
    # Prefix abbreviations are off: --learner.learning_rat must be an error, never learning_rate.
    args, unknown = parser.parse_known_args(argv)
    if unknown and not (args.command in COMMANDS and COMMANDS[args.command].config_flags):
        parser.error(f"unrecognized arguments: {' '.join(unknown)}")
    if args.command is None:
        parser.print_help()
        return 2
    try:
        return COMMANDS[args.command].run(args, unknown)
    except ConfigError as e:
        _say(f"swarm-node: {e}", logging.ERROR)
        return 2
    except KeyboardInterrupt:
        # Ctrl-C before the node's own handler is installed (loading the model, joining): the
        # start is abandoned; a failed start leaves nothing behind (TrainingNode.create).
        _say("swarm-node: interrupted (Ctrl-C)", logging.WARNING)
        return 130
    except SwarmError as e:
        _say(f"swarm-node: error: {e}", logging.ERROR)
        return 1


def _say(message: str, level: int) -> None:
    """The CLI's closing message: a plain line on stderr, or a JSON record under --run.log_format json."""
    from swarm_node.node.observe.logs import json_mode

    if json_mode():
        log.log(level, "%s", message)
    else:
        print(message, file=sys.stderr)
