"""A long run does not grow memory: every cache a node keeps about its peers is bounded by the
rounds it still reads, not by how long it has run. Three nodes over the in-memory transport for
40 rounds; each step the sizes of every cache (``SwarmExchange.buffer_sizes``: the pool, admitted
batches, heartbeats, per-peer counters, the replay memory, the transport's caches) and the
process's resident memory are sampled."""

from __future__ import annotations

import asyncio

import numpy as np

from swarm_node.node.transport.memory import MemoryHub
from tests.helpers.swarm_helpers import create_node, run_all, swarm_cfg

STEPS, WARM = 40, 14
# The replay memory holds what was signed in the verifier's clock window (max_clock_skew plus the
# staleness window): 1 + 2.5 s here, so it is full, like the staleness window, well before WARM.
SKEW = 1.0


def _rss_bytes() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * 4096


def test_caches_and_memory_stay_flat_over_a_long_run(warm_tiny_model_dir, tmp_path):
    hub = MemoryHub()
    cfgs = [swarm_cfg(warm_tiny_model_dir, tmp_path / f"n{i}", **{"train.seed": i, "train.steps": STEPS,
                                                                   "swarm.round_seconds": 0.5,
                                                                   "swarm.max_clock_skew": SKEW})
            for i in range(3)]
    samples: dict[int, list[dict]] = {}

    async def go():
        nodes = [await create_node(cfg, hub) for cfg in cfgs]

        async def watch():
            seen = -1
            while any(n.step < STEPS for n in nodes):
                step = min(n.step for n in nodes)
                if step != seen:
                    seen = step
                    samples[step] = [{**n.swarm.buffer_sizes(), "rss": _rss_bytes()} for n in nodes]
                await asyncio.sleep(0.02)

        return await run_all(nodes, watch())

    asyncio.run(go())
    steps = sorted(samples)
    assert steps[-1] >= STEPS - 2 and len(steps) > STEPS // 2, steps
    early = [s for s in steps if WARM <= s < (WARM + STEPS) // 2]
    late = [s for s in steps if s >= (WARM + STEPS) // 2]
    for node in range(3):
        for key in samples[steps[-1]][node]:
            if key == "rss":
                continue
            before = max(samples[s][node][key] for s in early)
            after = max(samples[s][node][key] for s in late)
            # What a round holds jitters with timing (a heartbeat more or less in the window); a
            # cache that grows with the run gains a round's worth each round: 13 rounds here.
            assert after <= 1.25 * before + 2, f"node {node}: {key} grew from {before} to {after}"
    assert samples[steps[-1]][0]["verifier_entries"] > 0 and samples[steps[-1]][0]["batches"] > 0
    # Resident memory: no trend once warm (a per-step leak of a tensor or a list shows as a slope).
    xs = [s for s in steps if s >= WARM]
    slope = np.polyfit(xs, [samples[s][0]["rss"] for s in xs], 1)[0]
    assert slope < 0.5 * 2 ** 20, f"resident memory grows {slope / 2 ** 20:.2f} MiB a step"
