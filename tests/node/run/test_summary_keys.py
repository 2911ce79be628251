"""docs/metrics.md names every key of summary.json's swarm block (node/run/summary.py)."""

from __future__ import annotations

from pathlib import Path

from swarm_node.node.run.summary import SWARM_SUMMARY_KEYS

DOC = Path(__file__).resolve().parents[3] / "docs" / "metrics.md"


def test_the_metrics_page_names_every_key_of_the_summarys_swarm_block():
    text = DOC.read_text()
    section = text[text.index("## summary.json"):text.index("## The Prometheus endpoint")]
    assert [k for k in SWARM_SUMMARY_KEYS if f"`{k}`" not in section] == []
