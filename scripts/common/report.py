"""The report files every script writes, and what a report quotes about how and where it ran.

- ``write_json``, ``write_markdown``, ``write_results``: a result's JSON and its markdown table
  (each script keeps its files' exact form: the indent, and whether the JSON ends in a newline);
- ``markdown_table``: a table's lines from its header and rows of cells;
- ``command_line``, ``machine``, ``environment``: the command that made a report, and the machine;
- ``spread_note`` and ``write_bench_report``: a benchmark's JSON and markdown, with a note when
  its round times say the CPU was oversubscribed;
- ``write_experiment_report``: an experiment's JSON and markdown (and its plot's link), keeping
  the hand-written reading at the end of the markdown when it is rerun.
"""

from __future__ import annotations

import json
import os
import platform
import sys
from pathlib import Path

NOTES = "## What this shows"  # the hand-written section of an experiment's report


# -- files ----------------------------------------------------------------------------------------
def write_json(path: Path, result, indent: int = 2, end: str = "\n") -> None:
    """``result`` as JSON into ``path`` (its folder made), followed by ``end``."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(result, indent=indent) + end)


def write_markdown(path: Path, lines: list[str], end: str = "\n") -> str:
    """The report's lines into ``path`` (its folder made), followed by ``end``; returns the text."""
    text = "\n".join(lines) + end
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return text


def write_results(out_dir: Path, stem: str, result: dict, md: list[str], indent: int = 2,
                  json_end: str = "\n") -> str:
    """``STEM.json`` and ``STEM.md`` into ``out_dir``; returns the markdown text."""
    write_json(out_dir / f"{stem}.json", result, indent, json_end)
    return write_markdown(out_dir / f"{stem}.md", md)


def markdown_table(headers: list[str], rows, align: str = "") -> list[str]:
    """A markdown table's lines: the header, the rule, then one line a row (a row: its cells, each
    written with ``str``).

    ``align`` has a letter a column, ``l`` or ``r`` (numbers read best right-aligned); columns past
    its end are left-aligned. Cells are written as given: one holding ``|`` must escape it.
    """
    if any(a not in "lr" for a in align) or len(align) > len(headers):
        raise ValueError(f"align takes l or r for each of {len(headers)} columns at most, got {align!r}")
    rule = "|" + "|".join("---:" if a == "r" else "---" for a in align.ljust(len(headers), "l")) + "|"
    lines = []
    for cells in (headers, *rows):
        if len(cells) != len(headers):  # a short row would shift every cell after it
            raise ValueError(f"a row of {len(cells)} cells under {len(headers)} headers: {cells!r}")
        lines.append("| " + " | ".join(map(str, cells)) + " |")
    return [lines[0], rule, *lines[1:]]


# -- what a report quotes -------------------------------------------------------------------------
def command_line() -> str:
    """How this report was made: ``python scripts/NAME.py ARGS``."""
    return " ".join(["python", f"scripts/{Path(sys.argv[0]).name}", *sys.argv[1:]])


def machine() -> str:
    """The machine, as a report names it: ``x86_64, 2 CPUs``."""
    return f"{platform.machine()}, {os.cpu_count()} CPUs"


def environment() -> dict:
    """Where a benchmark ran, for its JSON record."""
    import torch

    return {"python": platform.python_version(), "torch": torch.__version__, "machine": machine(),
            "load_avg_1m": os.getloadavg()[0] if hasattr(os, "getloadavg") else None}


# -- a benchmark's report -------------------------------------------------------------------------
def spread_note(times: dict[str, list[float]]) -> tuple[float, list[str]]:
    """The slowest round over the fastest, and the note the report adds when that is over 3x."""
    spread = max(max(v) for v in times.values()) / min(min(v) for v in times.values())
    if spread <= 3:
        return spread, []
    return spread, ["", f"Note: round times vary {spread:.0f}x between the fastest and the slowest round: "
                        "the CPU was oversubscribed (other jobs competing with torch's threads) for part of "
                        "the run, so the medians mix two regimes; the paired ratios compare rounds run "
                        "back to back. `--threads 1` avoids the stalls."]


def write_bench_report(out_dir: Path, stem: str, result: dict, md: list[str], times: dict[str, list[float]]) -> str:
    """Append the spread note when round times vary > 3x (and record the spread in ``result``),
    write ``stem``.json/.md, print and return the table."""
    result["max_over_min_time"], note = spread_note(times)
    md += note
    table = write_results(out_dir, stem, result, md)
    print(table)
    return table


# -- an experiment's report -----------------------------------------------------------------------
def write_experiment_report(out: Path, stem: str, lines: list[str], result: dict, plot_alt: str) -> None:
    """Write ``STEM.json`` (the numbers) and ``STEM.md`` (the report's lines, then the plot
    ``STEM.png`` the script drew). A hand-written "## What this shows" section already at the end
    of the markdown file (the reading of the numbers) is kept, so rerunning a script does not
    erase it."""
    write_json(out / f"{stem}.json", result, end="")
    lines = [*lines, f"\n![{plot_alt}]({stem}.png)"]
    path, notes = out / f"{stem}.md", ""
    if path.exists() and NOTES in (old := path.read_text()):
        notes = "\n" + old[old.index(NOTES):]
    write_markdown(path, lines, "\n" + notes)
    print("\n".join(lines))
