"""Registry of task families: id -> ``Task`` regeneration and random task-id sampling.

This is the one entry point nodes use to turn a peer's task id into a question and its
ground truth; it validates the id against the known families before generating.
"""

from __future__ import annotations

import logging
import random
from collections.abc import Callable, Sequence
from pathlib import Path

from swarm_node.rewards.errors import TaskError, UnknownTaskFamily
from swarm_node.rewards.families import arithmetic, base_conversion, boolean, counting, lists
from swarm_node.rewards.families.family import Family
from swarm_node.protocol.task_id import MAX_SEED, TaskId
from swarm_node.rewards.held_out import is_held_out
from swarm_node.rewards.task import Task

__all__ = ["FAMILIES", "BUILT_IN", "all_families", "get_family", "make_task", "sample_task_ids", "register",
           "resolve_families", "forget_sources"]

logger = logging.getLogger(__name__)

MAX_REDRAWS = 1000  # draws an excluded id may take before sampling gives up (a level is never mostly held out)

# Insertion order is the canonical family order (sampling and corpora iterate it).
FAMILIES: dict[str, Family] = {
    family.name: family
    for family in (
        arithmetic.FAMILY,
        lists.FAMILY,
        base_conversion.FAMILY,
        boolean.FAMILY,
        counting.FAMILY,
    )
}


BUILT_IN = tuple(FAMILIES)  # the families every node has; the others come from task sources (rewards/sources.py)
_SOURCES: dict[str, Family] = {}  # families this process loaded from task sources, by name
_loaded: dict[tuple, list[str]] = {}  # (spec, file identity) -> the family names its source registered


def register(family: Family) -> str:
    """Add a source's family (rewards/sources.py) to this process's registry; its name carries the
    digest of its content, so registering it again (the same spec loaded twice) changes nothing."""
    if family.name in BUILT_IN:
        raise TaskError(f"a task source may not replace the built-in family {family.name!r}")
    _SOURCES[family.name] = family
    return family.name


def forget_sources() -> None:
    """Drop every family loaded from a task source (tests: one test's sources are not the next's)."""
    _SOURCES.clear()
    _loaded.clear()


def _identity(spec: str) -> tuple:
    path = Path(spec.partition(":")[2])
    try:
        st = path.stat()
        return (spec, str(path.resolve()), st.st_mtime_ns, st.st_size)
    except OSError:
        return (spec,)


def resolve_families(entries: Sequence[str]) -> list[str]:
    """The family names ``tasks.families`` means: a built-in name as it is, a ``module:``,
    ``jsonl:`` or ``rg:`` entry loaded (once per file version), registered and named
    ``<name>_<digest>`` (a reasoning-gym preset: one family per dataset)."""
    from swarm_node.rewards.sources import is_source_spec, load_sources  # the sources import this module

    names = []
    for entry in entries:
        if is_source_spec(entry):
            key = _identity(entry)
            if key not in _loaded:
                _loaded[key] = [register(f) for f in load_sources(entry)]
            names.extend(_loaded[key])
        else:
            names.append(get_family(entry).name)
    return names


def all_families() -> list[str]:
    """Names of every family: the built-in ones in canonical order, then those loaded from task sources."""
    return [*FAMILIES, *_SOURCES]


def get_family(name: str) -> Family:
    """The family called ``name``; ``UnknownTaskFamily`` names the valid choices otherwise."""
    family = (FAMILIES.get(name) or _SOURCES.get(name)) if isinstance(name, str) else None
    if family is None:
        raise UnknownTaskFamily(name, all_families())
    return family


def make_task(task_id: TaskId | str) -> Task:
    """Regenerate the task ``task_id`` names (a ``TaskId`` or its ``"family:seed:difficulty"``).

    Deterministic: the same id yields the same question and answer on every node.
    """
    if isinstance(task_id, str):
        task_id = TaskId.parse(task_id)
    elif not isinstance(task_id, TaskId):
        raise TypeError(f"task_id must be a TaskId or str, got {type(task_id).__name__}")
    family = get_family(task_id.family)
    if family.name in BUILT_IN:
        question, answer = family.generate(task_id.rng(), task_id.difficulty)
    else:  # a user's generator: whatever it raises is this task's error, never the node's crash
        try:
            question, answer = family.generate(task_id.rng(), task_id.difficulty)
        except TaskError:
            raise
        except Exception as e:  # noqa: BLE001
            raise TaskError(f"family {family.name!r} failed to generate {task_id}: {type(e).__name__}: {e}") from e
    return Task(id=task_id, question=question, answer=answer)


def sample_task_ids(
    rng: random.Random,
    n: int,
    families: Sequence[str] | None = None,
    difficulties: Sequence[int] = (1, 2),
    exclude: Callable[[TaskId], bool] | None = None,
) -> list[TaskId]:
    """``n`` task ids with family and difficulty drawn uniformly from the given choices.

    Seeds are fresh 63-bit draws from ``rng``, so ids are reproducible from ``rng``'s state,
    outside the held-out seed space (rewards/held_out.py). ``families`` None: the built-in ones.
    Repeating a family or difficulty in the sequences weights it more. An id ``exclude`` is true for (a held-out question,
    rewards/reserved.py) is drawn again.
    """
    if type(n) is not int or n < 0:
        raise TaskError(f"n must be a non-negative int, got {n!r}")
    names = list(BUILT_IN) if families is None else _checked_families(families)
    levels = _checked_difficulties(difficulties, [get_family(name) for name in names])
    ids = [_draw(rng, names, levels, exclude) for _ in range(n)]
    logger.debug("sampled %d task ids over %s at difficulties %s", n, names, levels)
    return ids


def _draw(rng: random.Random, names: list[str], levels: list[int], exclude: Callable[[TaskId], bool] | None) -> TaskId:
    for _ in range(MAX_REDRAWS):
        task_id = TaskId(rng.choice(names), _training_seed(rng), rng.choice(levels))
        if task_id.family not in BUILT_IN:
            try:
                task = make_task(task_id)
                family = get_family(task_id.family)
                if family.scorer is None:
                    family.normalize(task.answer)  # what scoring does to the ground truth
            except Exception as e:  # noqa: BLE001 - a user's generator or scorer failed on this seed: draw another
                why = str(e) if isinstance(e, TaskError) else (f"family {task_id.family!r}'s scorer failed on the "
                                                               f"answer of {task_id}: {type(e).__name__}: {e}")
                logger.warning("%s; drawing another task", why)
                continue
        if exclude is None or not exclude(task_id):
            return task_id
    raise TaskError(f"{MAX_REDRAWS} draws over {names} at difficulties {levels} were all excluded (held out)")


def _training_seed(rng: random.Random) -> int:
    """A seed outside the held-out space: a draw that lands in it is drawn again. That happens
    with probability 2**-43 a draw, so every id drawn before the space was reserved is unchanged
    (tests pin such ids), and no node's training ever asks an evaluation question."""
    seed = rng.randint(0, MAX_SEED)
    while is_held_out(seed):
        seed = rng.randint(0, MAX_SEED)
    return seed


def _checked_families(families: Sequence[str]) -> list[str]:
    # A bare str is a Sequence[str] of characters; refuse it rather than sample 'a', 'r', ...
    if isinstance(families, str) or not isinstance(families, Sequence):
        raise TaskError(f"families must be a sequence of family names, got {families!r}")
    if not families:
        raise TaskError(f"families must not be empty; choose from {', '.join(FAMILIES)}")
    return [get_family(name).name for name in families]


def _checked_difficulties(difficulties: Sequence[int], families: list[Family]) -> list[int]:
    if not isinstance(difficulties, Sequence) or isinstance(difficulties, str):
        raise TaskError(f"difficulties must be a sequence of ints, got {difficulties!r}")
    if not difficulties:
        raise TaskError("difficulties must not be empty")
    for level in difficulties:
        # Every sampled family must support every sampled difficulty.
        for family in families:
            family.check_difficulty(level)
    return list(difficulties)
