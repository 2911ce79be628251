"""The soak's parts; scripts/soak.py runs them, and its docstring says what the soak is.

- ``schedule``: the kills, partition, bootstrap outage and attack phases, scaled to the run's
  length, and the sim faults file they become;
- ``sampler``: every 10 s, each process's memory, descriptors and threads (and its p2p
  daemons'), each node folder's bytes by kind, each node's status;
- ``run``: the soak as one ``swarm-node sim`` run, sampled, stopped at its end, then judged;
- ``maths``: the judging arithmetic (slope, growth, a restarting counter, step continuity, a
  rate over undisturbed intervals);
- ``judge``: the verdicts' numbers from the samples, the fault timeline and the run folder;
- ``verdict``: each target met or not; ``report``: soak.md and soak.png.
"""

import common  # noqa: F401 - puts the repository root on sys.path: these modules import swarm_node
