"""A resumed run's configuration: the run's own saved ``config.json``, with the ``--config`` file and
the flags of this start on top, never the defaults.

Without it ``--resume`` after a run started from a config file took the defaults for everything
the flags did not name (another task set, batch, learning rate, 600 steps) and trained on as if
nothing had changed. The changes a resume makes are said at start-up (``differences``), one line
per setting, so a deliberate change (``--train.steps 1000``) is visible and an accidental one too.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from swarm_node.node.errors import ConfigError
from swarm_node.node.config.config import NodeConfig, config_from_data, load_config, merge_sections, read_toml

__all__ = ["load_run_config", "differences", "saved_config"]

_NOT_A_CHANGE = {"run.resume"}  # what every resume sets


def saved_config(run_dir: Path) -> dict | None:
    """The sections a run saved in its ``config.json``, or None when it has none."""
    path = Path(run_dir) / "config.json"
    if not path.is_file():
        return None
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError) as e:
        raise ConfigError(f"cannot resume from {path}: {e}; pass the settings with --config, or start the "
                          f"run over in another --run.dir") from None
    if not isinstance(data, dict):
        raise ConfigError(f"cannot resume from {path}: not a config object")
    return data


def load_run_config(path: str | Path | None, overrides: dict[str, Any]) -> tuple[NodeConfig, list[str]]:
    """The config of this start, and (for a resume of a run that saved one) how it differs from
    the run's saved config. Saved < ``--config`` file < flags."""
    cfg = load_config(path, overrides)
    if not cfg.run.resume:
        return cfg, []
    saved = saved_config(Path(cfg.run.dir))
    if saved is None:
        return cfg, []
    data = merge_sections(saved, read_toml(path)) if path is not None else saved
    # The folder it resumes is the one it read: a run moved since it saved its path is resumed here.
    resumed = config_from_data(data, {**overrides, "run.dir": cfg.run.dir},
                               f"{cfg.run.dir}/config.json" + (f" + {path}" if path else ""))
    before = config_from_data(saved, {}, f"{cfg.run.dir}/config.json")
    return resumed, differences(before, resumed)


def differences(before: NodeConfig, after: NodeConfig) -> list[str]:
    """``section.key: old -> new`` for every setting that differs (resume aside)."""
    a, b = _flat(before.model_dump()), _flat(after.model_dump())
    return [f"{k}: {json.dumps(a.get(k))} -> {json.dumps(b.get(k))}" for k in sorted(set(a) | set(b))
            if k not in _NOT_A_CHANGE and a.get(k) != b.get(k)]


def _flat(d: dict, prefix: str = "") -> dict:
    out = {}
    for k, v in d.items():
        if isinstance(v, dict) and not prefix:
            out.update(_flat(v, f"{k}."))
        else:
            out[prefix + k] = v
    return out

