"""The supervised term end to end (learner.peer_sft_coef): two nodes over the in-memory transport,
the rows node/run/peer_sft.py marks reach the learner and are counted in metrics.jsonl; off, the
records have none of its keys."""

from __future__ import annotations

import asyncio
import json

import swarm_node.node.run.peer_sft as peer_sft
from swarm_node.node.transport.memory import MemoryHub
from tests.helpers.swarm_helpers import create_node, run_all, swarm_cfg

NODE_KEYS = {"peer_sft_verified", "peer_sft_canonical", "peer_sft_eligible", "peer_sft_capped",
             "peer_sft_failing_kinds"}


def _records(warm_tiny_model_dir, tmp_path, **over):
    async def go():
        hub = MemoryHub()
        nodes = [await create_node(swarm_cfg(warm_tiny_model_dir, tmp_path / f"n{i}", **{"train.seed": i, **over}), hub)
                 for i in range(2)]
        await run_all(nodes)
        return [[json.loads(line) for line in (n.run_dir / "metrics.jsonl").read_text().splitlines()] for n in nodes]
    return [r for node in asyncio.run(go()) for r in node]


def test_the_rows_chosen_reach_the_learner_and_are_counted(warm_tiny_model_dir, tmp_path, monkeypatch):
    # Every kind counts as failing, so every verified peer row is a candidate: what is tested here
    # is the way from the choice to the loss and the record (the choice: tests/node/run/test_peer_sft.py).
    monkeypatch.setattr(peer_sft.FailingKinds, "fails", lambda self, task_id: True)
    recs = _records(warm_tiny_model_dir, tmp_path, **{"learner.peer_sft_coef": 1.0, "learner.peer_sft_rows": 2,
                                                      "swarm.max_sender_share": 1.0, "train.steps": 6})
    for r in recs:
        assert NODE_KEYS <= set(r)
        assert r["peer_sft_eligible"] == r["peer_sft_canonical"] <= r["peer_sft_verified"] <= r["external_samples"]
        if "loss" in r:  # the learner stepped: what it took is what was chosen, at most R
            assert r["peer_sft_rows"] == r["peer_sft_eligible"] - r["peer_sft_capped"] <= 2
    assert sum(r.get("peer_sft_rows", 0) for r in recs) > 0, recs


def test_off_the_records_have_none_of_its_keys(warm_tiny_model_dir, tmp_path):
    recs = _records(warm_tiny_model_dir, tmp_path, **{"train.steps": 2})
    assert recs and all(not any(k.startswith("peer_sft") for k in r) for r in recs)
