"""``swarm-node doctor``, in one folder: what a node would meet if it joined now.

    command.py  the command: reads the config as ``join`` does, runs each check, prints a line each
    checkup.py  the verdicts: a line per check, the exit code, the judgements (pure)
    probe.py    the network steps: dial the bootstrap or broker, join as a throw-away peer, read
                the swarm's heartbeats

The carrier's half of the dial-back, asking (``ask_dialback``) and serving (``serve_dialback``),
stays in node/transport/hivemind/dialback.py, reached through the carrier registry's
``load_dialback``: doctor knows no carrier.
"""
