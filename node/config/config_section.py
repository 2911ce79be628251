"""What every section of a node's configuration is: a strict pydantic model that refuses a typo.

The sections themselves live in node/config/config.py (and the ``[tasks]``, ``[learner]`` and
``[eval]`` ones in node/config/tasks_config.py, learner_config.py and eval_config.py); this base is
theirs to share.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict

__all__ = ["Section", "none_words"]


class Section(BaseModel):
    # strict: a TOML string "8" is not silently an int; forbid: a typo is an error, not ignored.
    model_config = ConfigDict(extra="forbid", strict=True, validate_default=True)


def none_words(v: Any) -> Any:
    """``none``, ``off`` or ``null`` (any case) as None: how a user turns an optional setting off."""
    return None if isinstance(v, str) and v.lower() in ("none", "off", "null") else v
