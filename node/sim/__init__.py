"""The simulated swarm on one machine, with faults and attackers: what researchers run.

    runner.py      ``swarm-node sim``: child processes, faults, the live table, the summary
    adversary.py   ``swarm-node adversary``: a hostile peer that sends valid, signed, lying records

Nothing else in the project imports this package.
"""
