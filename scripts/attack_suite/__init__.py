"""The attack suite's parts; scripts/bench_attacks.py runs them, and its docstring says what is
measured and against which targets.

- ``scenarios``: the attacks each scenario runs, what each must leave in the honest nodes'
  counters, the bounds the targets use, and the honest swarm's ``Setup``;
- ``sampler``: the node processes found and sampled every second while a scenario runs
  (resident memory and CPU seconds, from /proc), and the adversary kept at the lowest priority;
- ``runner``: one scenario, a ``swarm-node sim`` run to its end, then measured;
- ``measure``: what each honest node measured, from its run folder and the samples;
- ``verdict``: the clean runs' baseline and each target met or not against it;
- ``report``: the markdown report, and the JSON and markdown files.
"""

import common  # noqa: F401 - puts the repository root on sys.path: these modules import swarm_node
