"""Live progress of a training run: a rich status panel on a terminal, log lines elsewhere.

``mode="auto"`` picks the panel when stderr is a TTY and throttled log lines otherwise (CI logs,
files), so the same run is readable in both places.
"""

from __future__ import annotations

import logging
import sys
import time
from pathlib import Path

from swarm_node.node.observe.held_out import evaluations, held_out_score

log = logging.getLogger(__name__)

__all__ = ["Progress"]

_PLAIN_EVERY_S = 5.0  # log-line throttle: frequent enough to see life, rare enough to read


def _fmt_eta(seconds: float) -> str:
    if seconds != seconds or seconds < 0:  # NaN
        return "?"
    m, s = divmod(int(seconds), 60)
    h, m = divmod(m, 60)
    return f"{h}:{m:02d}:{s:02d}" if h else f"{m}:{s:02d}"


class Progress:
    def __init__(self, mode: str, total_steps: int, start_step: int = 0, title: str = "swarm-node"):
        if mode == "auto":
            mode = "rich" if sys.stderr.isatty() else "plain"
        self.mode = mode
        self.total = total_steps
        self.start_step = start_step
        self.title = title
        self.t0 = time.monotonic()
        self._last_plain = 0.0
        self.held_out: dict | None = None  # the latest held-out evaluation (a record's "eval")
        self._live = None
        if mode == "rich":
            from rich.console import Console
            from rich.live import Live

            self._live = Live(self._render({}), console=Console(stderr=True), refresh_per_second=4,
                              transient=False)
            self._live.start()

    def begin(self, run_dir: Path) -> None:
        """Training starts now: the ETA counts from here (not from before the evaluation at start
        or a resume's restore), and the held-out column shows the run's latest evaluation (the
        one before training, or a resumed run's last) until the next."""
        from swarm_node.node.observe.metrics import read_metrics

        self.t0 = time.monotonic()
        done = evaluations(read_metrics(run_dir / "metrics.jsonl"), run_dir)
        self.held_out = done[-1] if done else None
        if self._live is not None:
            self._live.update(self._render({}))

    def _eta(self, step: int) -> float:
        done = step - self.start_step
        if done <= 0:
            return float("nan")
        return (time.monotonic() - self.t0) / done * (self.total - step)

    def _render(self, m: dict):
        from rich.table import Table

        t = Table(title=self.title, expand=False)
        swarm = "round" in m
        cols = ["step", "reward", "correct", "held-out", "ESS/B", "LR (x ESS factor)", "tok/s", "s/step", "ETA"]
        if swarm:
            cols += ["round", "peers", "groups in/used", "out", "rejected", "link (found via)"]
        for col in cols:
            t.add_column(col, justify="right")
        if m:
            held = held_out_score(self.held_out)
            row = [f"{m['step']}/{self.total}", f"{m.get('reward', 0):.3f}", f"{m.get('correct', 0):.3f}",
                   "-" if held is None else f"{held:.3f}", f"{m.get('rho', 1):.3f}",
                   f"{m.get('lr', 0):.2e} (x{m.get('lr_factor', 1):.2f})",
                   f"{m.get('tokens_per_s', 0):.0f}", f"{m.get('step_time', 0):.2f}",
                   _fmt_eta(self._eta(m["step"]))]
            if swarm:
                rejected = ", ".join(f"{k} {v}" for k, v in sorted((m.get("rejected") or {}).items()))
                row += [f"{m['round']} (+{m.get('rounds_skipped', 0)} skipped)", str(m.get("peers_alive", 0)),
                        f"{m.get('groups_in', 0)}/{m.get('groups_used', 0)}", str(m.get("rollouts_out", 0)),
                        f"{m.get('rejected_total', 0)}" + (f" ({rejected})" if rejected else ""),
                        f"{m.get('link', 'up')}" + (f" ({m['link_outages']} outages)" if m.get("link_outages") else "")
                        + (f" ({m['found_via']})" if m.get("found_via") else "")]
            t.add_row(*row)
        return t

    def update(self, m: dict) -> None:
        if isinstance(m.get("eval"), dict):  # logged by the evaluation itself (node/evaluate/evaluate.py)
            self.held_out = m["eval"]
        if self.mode == "rich" and self._live is not None:
            self._live.update(self._render(m))
        elif self.mode == "plain":
            now = time.monotonic()
            if now - self._last_plain >= _PLAIN_EVERY_S or m["step"] >= self.total:
                self._last_plain = now
                log.info("step %d/%d reward %.3f correct %.3f ESS/B %.3f lr %.2e (x%.3f) %.0f tok/s eta %s",
                         m["step"], self.total, m.get("reward", 0), m.get("correct", 0),
                         m.get("rho", 1), m.get("lr", 0), m.get("lr_factor", 1), m.get("tokens_per_s", 0),
                         _fmt_eta(self._eta(m["step"])), extra={"metrics": m})
                if "round" in m:
                    log.info("round %d: %d peers alive%s, groups in %d used %d (this step %d), rollouts out %d, "
                             "rejected %d %s%s", m["round"], m.get("peers_alive", 0),
                             f" (swarm found via {m['found_via']})" if m.get("found_via") else "", m.get("groups_in", 0),
                             m.get("groups_used", 0), m.get("external_groups", 0), m.get("rollouts_out", 0),
                             m.get("rejected_total", 0), m.get("rejected") or "",
                             f"; link {m['link']} ({m.get('link_outages', 0)} outages)"
                             if m.get("link", "up") != "up" or m.get("link_outages") else "")

    def close(self) -> None:
        if self._live is not None:
            self._live.stop()
            self._live = None
