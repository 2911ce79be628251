"""The parts of scripts/bench_swarm.py (publish-to-available latency and admission throughput);
its docstring says what is measured and how.

- ``nodes``: the swarm under test: the batch a default node publishes, exchanges configured as
  the trainer configures them, and started transports of each kind (memory, hivemind, libp2p);
- ``latency``: the trials: a publisher and N receivers running the node's receive loop, timed
  from signing to each receiver's admission;
- ``throughput``: envelopes per second through ``Verifier.verify`` and ``SwarmExchange.admit``;
- ``report``: the markdown tables.
"""

import common  # noqa: F401 - puts the repository root on sys.path: these modules import swarm_node
