"""Logging for the node: human-readable text or one JSON object per line (structured logs).

Extra fields passed as ``log.info(..., extra={"step": 3})`` appear as JSON keys.
"""

from __future__ import annotations

import json
import logging
import sys
import time

__all__ = ["setup_logging"]

_STD_ATTRS = set(vars(logging.makeLogRecord({}))) | {"message", "asctime"}


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        obj = {
            "ts": round(record.created, 3),
            "level": record.levelname,
            "logger": record.name,
            "msg": record.getMessage(),
        }
        obj.update({k: v for k, v in vars(record).items() if k not in _STD_ATTRS})
        if record.exc_info:
            obj["exc"] = self.formatException(record.exc_info)
        return json.dumps(obj, default=str)


def setup_logging(level: str = "INFO", fmt: str = "text") -> None:
    handler = logging.StreamHandler(sys.stderr)
    if fmt == "json":
        handler.setFormatter(JsonFormatter())
    else:
        f = logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s", "%H:%M:%S")
        f.converter = time.localtime
        handler.setFormatter(f)
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level)
    # Third-party chatter is not the node's story.
    for name in ("transformers", "urllib3", "matplotlib", "filelock"):
        logging.getLogger(name).setLevel(max(logging.WARNING, logging.getLevelName(level)))
