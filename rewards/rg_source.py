"""reasoning-gym as a task source (``rg:DATASET``, ``rg:DATASET:{json config}``, ``rg:rl-swarm``).

reasoning-gym's generators are procedural and seeded: an item is a function of (dataset name, its
config, the package's version, seed, index). A task id's seed here is the dataset's seed, and the
item is index 0 of a one-item dataset, so any node regenerates the question and the item it scores
against from the id alone, and scores with the dataset's own ``score_answer`` (which may give
partial credit: the correctness term is then that score, docs/algorithm.md). rl-swarm sends the
sender's answer along and trusts it; nothing of the sender's is trusted here.

The family name is ``rg_<dataset>_<digest>``, the digest over the dataset, its config and the
installed reasoning-gym version, so nodes with another config or version name another family and
leave each other's groups out (``dropped_unknown_family``, rewards/sources.py) instead of scoring
them against other items. Pin the version swarm-wide with the ``reasoning-gym`` extra.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import io
import json
import random
import threading
from importlib import metadata

from swarm_node.rewards.families.family import Family

__all__ = ["RL_SWARM_PRESET", "PRESETS", "rg_families", "rg_version"]

# Gensyn rl-swarm's dataset set (its reasoning-gym configuration).
RL_SWARM_PRESET = ("arc_1d", "basic_arithmetic", "base_conversion", "bf", "binary_matrix", "calendar_arithmetic",
                   "decimal_arithmetic", "fraction_simplification", "propositional_logic")
PRESETS = {"rl-swarm": RL_SWARM_PRESET}
_CACHE_ITEMS = 4096  # regenerated items kept for scoring (a task is scored once per completion)


_QUIET = threading.Lock()


@contextlib.contextmanager
def _quiet():
    # Some generators print (bf's interpreter writes progress dots to stdout): keep the node's
    # stdout to what it says itself (the summary, JSON logs). redirect_stdout swaps sys.stdout for
    # the whole process, so two threads (generation, admission) must not interleave their swaps:
    # the last to restore would leave the other's buffer in place for good.
    with _QUIET, contextlib.redirect_stdout(io.StringIO()):
        yield


def rg_version() -> str:
    try:
        return metadata.version("reasoning-gym")
    except metadata.PackageNotFoundError:
        return ""


def _error(spec: str, why: str):
    from swarm_node.rewards.sources import TaskSourceError  # the sources module imports this one

    return TaskSourceError(f"{spec}: {why}")


def rg_families(spec: str) -> list[Family]:
    """The families an ``rg:`` entry names: one dataset (default or JSON config) or a preset."""
    version = rg_version()
    if not version:
        raise _error(spec, "needs reasoning-gym: pip install 'swarm-node[reasoning-gym]'")
    where = spec.partition(":")[2]
    name, _, config_text = where.partition(":")
    if name in PRESETS and not config_text:
        return [_family(spec, n, {}, version) for n in PRESETS[name]]
    config = {}
    if config_text:
        try:
            config = json.loads(config_text)
        except json.JSONDecodeError as e:
            raise _error(spec, f"the config after the dataset name is not JSON ({e.msg})") from e
        if not isinstance(config, dict):
            raise _error(spec, "the config after the dataset name must be a JSON object")
        if {"seed", "size"} & set(config):
            raise _error(spec, "seed and size come from each task id; leave them out of the config")
    return [_family(spec, name, config, version)]


def _family(spec: str, name: str, config: dict, version: str) -> Family:
    import reasoning_gym
    from reasoning_gym.factory import DATASETS

    if name not in DATASETS:
        presets = ", ".join(f"rg:{p}" for p in PRESETS)
        raise _error(spec, f"unknown reasoning-gym dataset {name!r} (reasoning-gym {version} has {len(DATASETS)}: "
                           f"{', '.join(sorted(DATASETS)[:8])}, ...; presets: {presets})")
    try:
        with _quiet():
            probe = reasoning_gym.create_dataset(name, seed=0, size=1, **config)
            item = probe[0]
    except Exception as e:  # noqa: BLE001 - a config the dataset refuses: say which and why
        raise _error(spec, f"reasoning-gym refused {name} with config {config}: {type(e).__name__}: {e}") from e
    canonical = json.dumps({"dataset": name, "config": config, "version": version}, sort_keys=True, default=str)
    digest = hashlib.sha256(canonical.encode()).hexdigest()
    short = name.replace("-", "_")[:19]  # "rg_" + 19 + "_" + 8 hex = 31 of a name's 32 characters
    family_name = f"rg_{short}_{digest[:8]}"

    @functools.lru_cache(maxsize=_CACHE_ITEMS)
    def entry(seed: int) -> dict:
        with _quiet():
            return reasoning_gym.create_dataset(name, seed=seed, size=1, **config)[0]

    def generate(rng: random.Random, difficulty: int) -> tuple[str, str]:
        e = entry(rng.getrandbits(63))
        return e["question"], "" if e.get("answer") is None else str(e["answer"])

    def score(answer: str, task) -> float:
        # The dataset's own scoring, of this task's regenerated item: the seed is the id's.
        item = entry(task.id.rng().getrandbits(63))
        with _quiet():
            return float(probe.score_answer(answer, item))

    del item
    return Family(name=family_name, max_difficulty=1,
                  description=f"reasoning-gym {version} {name}" + (f" {config}" if config else ""),
                  generator=generate, normalizer=str.strip, scorer=score)
