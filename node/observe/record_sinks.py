"""Where a node's per-step records go: metrics.jsonl always, and on request the logging tools
researchers already use, TensorBoard event files (``run.tensorboard``) and Weights & Biases
(``run.wandb``: offline by default, no account or network), written from the same records.

metrics.jsonl is the record of truth and is written first; a sink that fails (a full disk under
its folder, a W&B service that died) is said once in the log and dropped, and training goes on.
``scalars`` decides, in one place, which numbers of a record each tool shows and under what name.
"""

from __future__ import annotations

import json
import logging
import math
import secrets
from importlib.util import find_spec
from pathlib import Path
from typing import Any, Protocol

from swarm_node.node.errors import ConfigError
from swarm_node.node.observe.metrics import MetricsWriter

log = logging.getLogger(__name__)

__all__ = ["RecordLog", "TensorBoardSink", "WandbSink", "scalars", "check_sinks_available", "open_record_log",
           "TENSORBOARD_DIR", "WANDB_DIR"]

TENSORBOARD_DIR = "tensorboard"  # RUN/tensorboard: `tensorboard --logdir RUN` finds it
WANDB_DIR = "wandb"  # RUN/wandb: W&B's own folder (offline runs, their files)
_WANDB_ID_FILE = "swarm_node_run_id"  # in RUN/wandb: a resumed run continues the same W&B run
_NOT_SHOWN = {"step", "time"}  # the x axis and the wall time of every point, not curves of their own


def _number(v: Any) -> float | None:
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        return None
    return float(v) if math.isfinite(v) else None


def scalars(record: dict[str, Any]) -> dict[str, float]:
    """The curves of one record: every finite number under ``train/<key>``, and a held-out
    evaluation (``record["eval"]``) under ``held_out/greedy``, ``held_out/sampled``,
    ``held_out/pass_at_k``, ``held_out/seconds`` and ``held_out/<family>/greedy`` (and sampled,
    pass_at_k). Strings, lists, flags, null and the
    per-peer counts (one curve per peer id would grow without bound in a public swarm) are left
    to metrics.jsonl."""
    out: dict[str, float] = {}
    for k, v in record.items():
        x = _number(v)
        if x is not None and k not in _NOT_SHOWN:
            out[f"train/{k}"] = x
    ev = record.get("eval")
    if isinstance(ev, dict):
        for k, v in ev.items():
            x = _number(v)
            if x is not None and k not in ("n", "k"):
                out[f"held_out/{k}"] = x
        for fam, d in (ev.get("families") or {}).items():
            for k, v in (d or {}).items():
                x = _number(v)
                if x is not None and k != "n":
                    out[f"held_out/{fam}/{k}"] = x
    return out


class Sink(Protocol):
    name: str

    def write(self, step: int, values: dict[str, float], walltime: float | None) -> None: ...

    def close(self) -> None: ...


class TensorBoardSink:
    """Event files in RUN/tensorboard, one scalar per curve per step. On resume the events past
    the checkpoint's step, written before the stop, are purged by TensorBoard's reader
    (``purge_step``), so a resumed run shows one history, as metrics.jsonl does."""

    name = "TensorBoard"

    def __init__(self, run_dir: Path, start_step: int):
        from torch.utils.tensorboard import SummaryWriter

        self._w = SummaryWriter(log_dir=str(Path(run_dir) / TENSORBOARD_DIR),
                                purge_step=start_step + 1 if start_step > 0 else None)

    def write(self, step: int, values: dict[str, float], walltime: float | None) -> None:
        for tag, v in values.items():
            self._w.add_scalar(tag, v, global_step=step, walltime=walltime)
        self._w.flush()  # a crash loses at most this step, as with metrics.jsonl

    def close(self) -> None:
        self._w.close()


class WandbSink:
    """A Weights & Biases run in RUN/wandb, its config the node's, one ``log`` per step. Offline
    (the default) needs no account and no network: ``wandb sync RUN/wandb/offline-run-*``
    uploads it later. A resumed run continues the same W&B run id (kept in RUN/wandb)."""

    name = "Weights & Biases"

    def __init__(self, run_dir: Path, mode: str, project: str, config: dict, start_step: int):
        import wandb

        folder = Path(run_dir) / WANDB_DIR
        folder.mkdir(parents=True, exist_ok=True)
        id_file = folder / _WANDB_ID_FILE
        run_id = id_file.read_text().strip() if start_step > 0 and id_file.is_file() else secrets.token_hex(8)
        id_file.write_text(run_id)
        self._run = wandb.init(project=project, dir=str(run_dir), mode=mode, id=run_id, resume="allow",
                               name=Path(run_dir).name, config=config, settings=wandb.Settings(silent=True, console="off"))

    def write(self, step: int, values: dict[str, float], walltime: float | None) -> None:
        self._run.log(values, step=step)

    def close(self) -> None:
        self._run.finish()


class RecordLog:
    """metrics.jsonl and the sinks, written together: what the trainer writes each step."""

    def __init__(self, writer: MetricsWriter, sinks: list[Sink] = ()):
        self.writer = writer
        self.sinks = list(sinks)

    def write(self, record: dict[str, Any]) -> None:
        self.writer.write(record)
        self._to_sinks(int(record.get("step", 0)), scalars(record), record.get("time"))

    def start_eval(self, result: dict | None) -> None:
        """The evaluation before the first step (RUN/eval/step_0.json, not a metrics record): the
        sinks show it at step 0, so a held-out curve starts where training did."""
        if result is not None:
            self._to_sinks(0, scalars({"eval": result}), None)

    def _to_sinks(self, step: int, values: dict[str, float], walltime: Any) -> None:
        wall = _number(walltime)
        for sink in list(self.sinks):
            try:
                sink.write(step, values, wall)
            except Exception as e:  # noqa: BLE001 - a logging tool never stops training
                log.warning("%s logging failed at step %d and is off for the rest of the run "
                            "(metrics.jsonl has every record): %s: %s", sink.name, step, type(e).__name__, e)
                self.sinks.remove(sink)
                self._close(sink)

    def _close(self, sink: Sink) -> None:
        try:
            sink.close()
        except Exception as e:  # noqa: BLE001
            log.warning("closing %s logging failed: %s: %s", sink.name, type(e).__name__, e)

    def close(self) -> None:
        try:
            for sink in self.sinks:
                self._close(sink)
            self.sinks = []
        finally:
            self.writer.close()


def check_sinks_available(tensorboard: bool, wandb: str) -> None:
    """Before the model loads: a sink asked for whose package is missing stops the start with
    what to install."""
    if tensorboard and find_spec("tensorboard") is None:
        raise ConfigError("run.tensorboard needs the tensorboard package: pip install 'swarm-node[tensorboard]' "
                          "(or set --run.tensorboard false)")
    if wandb != "off" and find_spec("wandb") is None:
        raise ConfigError(f"run.wandb {wandb} needs the wandb package: pip install 'swarm-node[wandb]' "
                          f"(or set --run.wandb off)")


def open_record_log(run_dir: Path, start_step: int, *, tensorboard: bool = False, wandb: str = "off",
                    wandb_project: str = "swarm-node", config_json: str = "{}") -> RecordLog:
    """metrics.jsonl (records past ``start_step`` dropped on resume) and the sinks asked for."""
    writer = MetricsWriter(Path(run_dir) / "metrics.jsonl", resume_from_step=start_step if start_step > 0 else None)
    sinks: list[Sink] = []
    wanted = [(TensorBoardSink.name, lambda: TensorBoardSink(run_dir, start_step))] if tensorboard else []
    if wandb != "off":
        wanted.append((WandbSink.name, lambda: WandbSink(run_dir, wandb, wandb_project, json.loads(config_json),
                                                         start_step)))
    try:
        for name, make in wanted:
            try:
                sinks.append(make())
            except Exception as e:  # a start that asked for it says why it cannot have it
                raise ConfigError(f"cannot start {name} logging in {run_dir}: {type(e).__name__}: {e}") from e
    except BaseException:
        RecordLog(writer, sinks).close()
        raise
    return RecordLog(writer, sinks)
