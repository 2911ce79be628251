"""The simulated swarm on one machine, with faults and attackers: what researchers run.

    runner.py      ``swarm-node sim``: the run itself (start the join point and the nodes, watch, stop, judge)
    spec.py        SimSpec: what one sim run is (nodes, transport, folder, flags, faults)
    faults.py      the ``--faults`` file: its schema and checks
    preflight.py   before anything starts: what an earlier run in the folder means; warnings
    argv.py        each child's command line (a node's flags, role and faults; adversary; worker)
    children.py    the child processes: spawn, kill -9, stop in order, die with the simulator
    infra.py       what the nodes need first: the default model, the bootstrap peer or broker
    kills.py       ``[[kill]]`` faults carried out: kill at a step or a time, restart with --resume
    timed.py       faults by the clock: adversaries' attack phases, bootstrap outages; faults.jsonl
    table.py       the live table (rich, or one plain log line) from each node's status.json
    control.py     ``--control C``: the same recipe trained alone beside the swarm, and the comparison
    summary.py     summary.json, summary.md and the plots at the end of a run
    worker.py      ``swarm-node sim-worker``: all N nodes in one process over memory
    adversary/     ``swarm-node adversary``: a hostile peer that sends valid, signed, lying records

Nothing else in the project imports this package.
"""
