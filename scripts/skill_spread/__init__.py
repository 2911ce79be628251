"""The parts of scripts/exp_skill_spread.py; its docstring says what is measured and how.

- ``analysis``: the pure statistics of the study, from each node's held-out evaluations: the bar
  (half the holders' level), the step a node first reaches it, the speed-up of sharing over
  learning alone, finals, collapses; and the plot of the non-holders' curves.
"""

import common  # noqa: F401 - puts the repository root on sys.path: these modules import swarm_node
