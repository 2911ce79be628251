"""The ``swarm-node`` command line: a thin launcher over the node.

    dispatch.py    main: parse, run the command (``COMMANDS``: name -> function), errors -> exit codes
    parser.py      the argument parser: every command, its flags and its help
    flags.py       config overrides from ``--section.key value`` flags
    train.py       train (solo) and join (a swarm; ``join_transport`` infers its carrier)
    sim.py         sim (a local swarm, one live table) and sim-worker (its in-process nodes)
    adversary.py   adversary (a malicious peer, for testing a swarm)
    bootstrap.py   bootstrap (the peer nodes join through)
    doctor/        doctor (what a node would meet if it joined now: peers, NAT, clock, GPU, disk):
                   its command, its verdicts and its network steps
    tools.py       id, build-model and plot
    eval.py        eval (a checkpoint's held-out correctness, after the fact: node/evaluate/)
    export.py      export (a checkpoint as a plain Hugging Face folder to take away: node/evaluate/)
    __main__.py    ``python -m swarm_node.node.cli``

Heavy libraries (torch, transformers) are imported only after arguments parse, inside the
command that needs them, so ``--help`` and config errors answer at once (tests/test_imports.py
checks that importing this package imports no torch). ``python -m swarm_node`` (or
``python -m swarm_node.node.cli``) runs ``main``.
"""

from swarm_node.node.cli.dispatch import main

__all__ = ["main"]
