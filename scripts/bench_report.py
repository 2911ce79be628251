"""Shared tail of the benchmark scripts: the oversubscription note and the JSON + markdown files."""

from __future__ import annotations

import json
from pathlib import Path


def write_report(out_dir: Path, stem: str, result: dict, md: list[str], times: dict[str, list[float]]) -> str:
    """Append the spread note when round times vary > 3x, write ``stem``.json/.md, return the table."""
    spread = max(max(v) for v in times.values()) / min(min(v) for v in times.values())
    result["max_over_min_time"] = spread
    if spread > 3:
        md += ["", f"Note: round times vary {spread:.0f}x between the fastest and the slowest round: "
                   "the CPU was oversubscribed (other jobs competing with torch's threads) for part of "
                   "the run, so the medians mix two regimes; the paired ratios compare rounds run "
                   "back to back. `--threads 1` avoids the stalls."]
    table = "\n".join(md) + "\n"
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / f"{stem}.json").write_text(json.dumps(result, indent=2) + "\n")
    (out_dir / f"{stem}.md").write_text(table)
    print(table)
    return table
