"""Live progress (rich panel and plain log lines) and structured JSON logs."""

from __future__ import annotations

import io
import json
import logging

from swarm_node.node.observe.logs import JsonFormatter, setup_logging
from swarm_node.node.observe.progress import Progress

RECORD = {"step": 3, "reward": 0.25, "correct": 0.2, "rho": 0.9, "lr": 9e-5, "lr_factor": 0.95,
          "tokens_per_s": 1234.0, "step_time": 0.3}


def test_rich_panel_renders_every_column():
    p = Progress("rich", total_steps=10)
    try:
        p.update(RECORD)
        from rich.console import Console

        console = Console(file=io.StringIO(), width=200)
        console.print(p._render(RECORD))
        text = console.file.getvalue()
    finally:
        p.close()
    for needle in ("3/10", "0.250", "0.900", "9.00e-05", "x0.95", "1234"):
        assert needle in text, needle


def test_plain_mode_logs_a_line_with_the_metrics(caplog):
    p = Progress("plain", total_steps=3)
    with caplog.at_level(logging.INFO, logger="swarm_node.node.observe.progress"):
        p.update(RECORD)  # the last step is always logged, whatever the throttle
    p.close()
    assert "step 3/3" in caplog.text and "ESS/B 0.900" in caplog.text


def test_json_logs_are_one_object_per_line_with_extra_fields():
    rec = logging.LogRecord("swarm_node.node.run.trainer", logging.INFO, __file__, 1, "checkpoint %s", ("step_000003",), None)
    rec.step = 3
    obj = json.loads(JsonFormatter().format(rec))
    assert obj["msg"] == "checkpoint step_000003" and obj["level"] == "INFO" and obj["step"] == 3


def test_setup_logging_installs_one_handler():
    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    try:
        setup_logging("DEBUG", "json")
        setup_logging("INFO", "text")
        assert len(root.handlers) == 1 and root.level == logging.INFO
    finally:
        root.handlers[:] = handlers
        root.setLevel(level)
