"""Logging for the node: human-readable text or one JSON object per line (structured logs).

Extra fields passed as ``log.info(..., extra={"step": 3})`` appear as JSON keys.

In JSON mode (``--run.log_format json``) stderr must carry nothing but JSON lines, so the
libraries that write there on their own are routed through the root logger instead:

* Python ``warnings`` (transformers' and peft's ``FutureWarning``s, ...) become records of the
  ``py.warnings`` logger: ``msg`` is the warning text, ``category`` and ``location``
  (``file:line``) are fields.
* transformers' default handler is removed and its logger propagates; its progress bars (and
  huggingface_hub's) are off. transformers is imported here for that (about a second), which
  only the commands that load a model anyway ask for.
* hivemind's own handler (``hivemind.utils.logging``) is dropped and its loggers propagate, the
  p2p daemon's re-logged lines included. hivemind is heavy, so it is never imported here:
  ``setup_logging`` adopts it if it is already loaded, and the module that imports it calls
  ``adopt_library_logging()`` right after (``node/transport/hivemind/transport.py``).
* an uncaught exception is logged as one record with its traceback in ``exc``.

Text mode leaves all of that as it has always been (and undoes it after a JSON setup).
"""

from __future__ import annotations

import importlib.util
import json
import logging
import os
import sys
import threading
import time
import warnings

__all__ = ["JsonFormatter", "adopt_library_logging", "json_mode", "setup_logging"]

_STD_ATTRS = set(vars(logging.makeLogRecord({}))) | {"message", "asctime"}
# hivemind renames WARNING to "WARN" process-wide (logging.addLevelName); JSON keeps the standard names.
_LEVEL_NAMES = {logging.DEBUG: "DEBUG", logging.INFO: "INFO", logging.WARNING: "WARNING",
                logging.ERROR: "ERROR", logging.CRITICAL: "CRITICAL"}


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        obj = {
            "ts": round(record.created, 3),
            "level": _LEVEL_NAMES.get(record.levelno, record.levelname),
            "logger": record.name,
            "msg": record.getMessage(),
        }
        obj.update({k: v for k, v in vars(record).items() if k not in _STD_ATTRS})
        if record.exc_info:
            obj["exc"] = self.formatException(record.exc_info)
        if record.stack_info:
            obj["stack"] = self.formatStack(record.stack_info)
        return json.dumps(obj, default=str)  # newlines inside values are escaped: one line per record


# --- what JSON mode changed, so that a later text-mode setup can put it back --------------------

_json_mode = False
_saved_showwarning = None
_saved_excepthook = None
_saved_threading_excepthook = None
_transformers_saved: dict | None = None  # its logger's and progress bars' state before JSON mode
_hivemind_adopted = False


def _show_warning(message, category, filename, lineno, file=None, line=None) -> None:
    """``warnings.showwarning`` in JSON mode: one ``py.warnings`` record, the text as its message."""
    if file is not None:  # an explicit destination (not stderr): leave it to the original
        (_saved_showwarning or warnings._showwarning_orig)(message, category, filename, lineno, file, line)
        return
    logging.getLogger("py.warnings").warning(
        "%s", message, extra={"category": category.__name__, "location": f"{filename}:{lineno}"})


def _log_uncaught(exc_type, exc, tb) -> None:
    if issubclass(exc_type, KeyboardInterrupt):
        _saved_excepthook(exc_type, exc, tb)
        return
    logging.getLogger("node").critical("uncaught exception: %s", exc_type.__name__, exc_info=(exc_type, exc, tb))


def _log_uncaught_in_thread(args) -> None:
    if args.exc_type is SystemExit:
        return
    logging.getLogger("node").critical("uncaught exception in thread %s: %s",
                                       args.thread.name if args.thread else "?", args.exc_type.__name__,
                                       exc_info=(args.exc_type, args.exc_value, args.exc_traceback))


def _set_python_hooks(json_mode: bool) -> None:
    global _saved_showwarning, _saved_excepthook, _saved_threading_excepthook
    if json_mode and _saved_showwarning is None:
        _saved_showwarning, warnings.showwarning = warnings.showwarning, _show_warning
        _saved_excepthook, sys.excepthook = sys.excepthook, _log_uncaught
        _saved_threading_excepthook, threading.excepthook = threading.excepthook, _log_uncaught_in_thread
    elif not json_mode and _saved_showwarning is not None:
        if warnings.showwarning is _show_warning:
            warnings.showwarning = _saved_showwarning
        if sys.excepthook is _log_uncaught:
            sys.excepthook = _saved_excepthook
        if threading.excepthook is _log_uncaught_in_thread:
            threading.excepthook = _saved_threading_excepthook
        _saved_showwarning = _saved_excepthook = _saved_threading_excepthook = None


def _adopt_transformers(json_mode: bool) -> None:
    global _transformers_saved
    if json_mode and _transformers_saved is None:
        if "transformers" not in sys.modules and importlib.util.find_spec("transformers") is None:
            return
        import huggingface_hub.utils as hub_utils
        from transformers.utils import logging as tf_logging

        lib = tf_logging.get_logger()  # creates its default handler if nothing has yet
        _transformers_saved = {"propagate": lib.propagate, "handler": tf_logging._default_handler in lib.handlers,
                               "tf_bars": tf_logging.is_progress_bar_enabled(),
                               "hub_bars": not hub_utils.are_progress_bars_disabled(),
                               "env": os.environ.get("HF_HUB_DISABLE_PROGRESS_BARS")}
        tf_logging.disable_default_handler()
        tf_logging.enable_propagation()
        tf_logging.disable_progress_bar()  # "Writing model shards: 100%|..." and the like
        hub_utils.disable_progress_bars()
        os.environ["HF_HUB_DISABLE_PROGRESS_BARS"] = "1"  # for any child process (read at import)
    elif not json_mode and _transformers_saved is not None:
        import huggingface_hub.utils as hub_utils
        from transformers.utils import logging as tf_logging

        saved, _transformers_saved = _transformers_saved, None
        tf_logging.get_logger().propagate = saved["propagate"]
        if saved["handler"]:
            tf_logging.enable_default_handler()
        if saved["tf_bars"]:
            tf_logging.enable_progress_bar()
        if saved["hub_bars"]:
            hub_utils.enable_progress_bars()
        if saved["env"] is None:
            os.environ.pop("HF_HUB_DISABLE_PROGRESS_BARS", None)
        else:
            os.environ["HF_HUB_DISABLE_PROGRESS_BARS"] = saved["env"]


class _ClosingNoise(logging.Filter):
    """The p2p daemon's "use of closed network connection", logged as an error when its listener
    closes under a stop (Ctrl-C): the daemon going away as asked, not a fault to show a user
    (still shown with hivemind's DEBUG level)."""

    def filter(self, record: logging.LogRecord) -> bool:
        if "use of closed network connection" not in record.getMessage():
            return True
        return logging.getLogger("hivemind").isEnabledFor(logging.DEBUG)


_CLOSING_NOISE = _ClosingNoise()


def _adopt_hivemind(json_mode: bool) -> None:
    global _hivemind_adopted
    hm = sys.modules.get("hivemind.utils.logging")  # never imported from here: hivemind is heavy
    if hm is None:
        return
    daemon_log = logging.getLogger("hivemind.p2p.p2p_daemon")
    if _CLOSING_NOISE not in daemon_log.filters:
        daemon_log.addFilter(_CLOSING_NOISE)
    if json_mode == _hivemind_adopted:
        return
    if json_mode:
        hm.use_hivemind_log_handler("nowhere")  # hivemind loggers propagate to ours
        # Its level stays what hivemind would use (HIVEMIND_LOGLEVEL, default INFO) whatever the node's.
        logging.getLogger("hivemind").setLevel(hm.loglevel)
    else:
        hm.use_hivemind_log_handler("in_hivemind")
    _hivemind_adopted = json_mode


def json_mode() -> bool:
    """Whether stderr is one JSON object per line (then the CLI's own messages go through the logger)."""
    return _json_mode


def adopt_library_logging() -> None:
    """Route transformers' and hivemind's own log output through the node's handler (JSON mode only).

    Cheap and idempotent; a no-op before ``setup_logging(..., "json")`` and in text mode. Modules
    that import hivemind call it right after (``setup_logging`` cannot see a later import).
    """
    _adopt_transformers(_json_mode)
    _adopt_hivemind(_json_mode)


def setup_logging(level: str = "INFO", fmt: str = "text") -> None:
    global _json_mode
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
    _json_mode = fmt == "json"
    _set_python_hooks(_json_mode)
    adopt_library_logging()  # before the levels below: a first transformers import sets its own
    # Third-party chatter is not the node's story.
    for name in ("transformers", "urllib3", "matplotlib", "filelock"):
        logging.getLogger(name).setLevel(max(logging.WARNING, logging.getLevelName(level)))
