"""Task sources beyond the built-in families: a user's own family module and a JSONL dataset.

A node names them in ``tasks.families`` beside the built-in names: ``"module:my_pkg.tasks"`` or
``"module:path/to/tasks.py"`` (a module whose ``FAMILY`` is a ``rewards.Family``: a generator
``(rng, difficulty) -> (question, answer)`` and a normalizer, the scorer, both pure), and
``"jsonl:path/to/data.jsonl"`` (one ``{"question": ..., "answer": ...}`` object a line, with an
optional ``"level"`` (default 1) and ``"scorer"``, one of ``SCORERS``, the same on every line).

Each source becomes a family registered under ``<name>_<digest>`` (``rewards/registry.py``): the
digest is of what the source is (a module: its file, and its tasks and scoring for fixed probe
seeds at every level; a dataset: its parsed items), so a task id says which content it was drawn from. A peer whose file
or module differs, by one answer, names a family this node does not have, and its groups are
left out (``dropped_unknown_family``: counted, no fault of the sender; node/swarm/unusable.py)
instead of being scored against another ground truth. The id grammar does not change (``family:seed:difficulty``), and held-out
questions are reserved for every source alike (rewards/reserved.py).

Everything is checked when the source loads (at start-up, in the config): a file that does not
parse, a family that is not deterministic, a generator or scorer that raises on the probes. Each
gives a ``TaskSourceError`` naming the source, the line or the seed.
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.util
import json
import random
import re
import sys
from collections.abc import Callable
from pathlib import Path

from swarm_node.rewards.errors import TaskError
from swarm_node.rewards.families.family import Family
from swarm_node.rewards.families.normalize import canonical_token, canonical_word

__all__ = ["SCORERS", "TaskSourceError", "is_source_spec", "load_source", "load_sources", "family_from_module",
           "family_from_jsonl", "PROBE_SEEDS", "MAX_DATASET_BYTES"]

SCORERS: dict[str, Callable[[str], str]] = {
    "auto": canonical_token,  # an integer by its value, anything else as lowercase words (the built-ins' way)
    "text": canonical_word,  # case and runs of spaces ignored
    "exact": str.strip,  # only surrounding space ignored
}
PROBE_SEEDS = 16  # tasks generated twice per level when a module loads: determinism, types, the scorer
MAX_DATASET_BYTES = 256 * 2**20  # a dataset is read whole into memory
_MAX_LEVELS = 64
_NAME_CHARS = 23  # + "_" + 8 hex digits = the 32 characters a family name may have
_SAFE = re.compile(r"[^a-z0-9_]+")


class TaskSourceError(TaskError):
    """A task source (module or dataset) that cannot be used, and why."""


def is_source_spec(entry: str) -> bool:
    """True for a ``tasks.families`` entry that names a source (``module:``, ``jsonl:``, ``rg:``)."""
    return isinstance(entry, str) and entry.startswith(("module:", "jsonl:", "rg:"))


def _family_name(base: str, digest: str) -> str:
    stem = _SAFE.sub("_", base.lower()).strip("_")[:_NAME_CHARS] or "tasks"
    if not stem[0].isalpha():
        stem = "t" + stem[:_NAME_CHARS - 1]
    return f"{stem}_{digest[:8]}"


def load_sources(spec: str) -> list[Family]:
    """The families a source entry names: one, or a reasoning-gym preset's several."""
    if spec.startswith("rg:"):
        from swarm_node.rewards.rg_source import rg_families

        return rg_families(spec)
    return [load_source(spec)]


def load_source(spec: str) -> Family:
    """The family a ``module:...`` or ``jsonl:...`` entry names, loaded and checked."""
    kind, _, where = spec.partition(":")
    if not where:
        raise TaskSourceError(f"{spec!r}: name the {kind} after the colon ({kind}:...)")
    if kind == "module":
        return family_from_module(where)
    if kind == "jsonl":
        return family_from_jsonl(Path(where))
    raise TaskSourceError(f"{spec!r}: a task source is module:NAME_OR_FILE.py, jsonl:FILE.jsonl or rg:DATASET")


# -- a user's family module ---------------------------------------------------------------------

def _import(where: str):
    if where.endswith(".py") or "/" in where:
        path = Path(where)
        if not path.is_file():
            raise TaskSourceError(f"module:{where}: no such file")
        name = "swarm_node_tasks_" + hashlib.sha256(str(path.resolve()).encode()).hexdigest()[:12]
        if name in sys.modules:
            return sys.modules[name]
        spec = importlib.util.spec_from_file_location(name, path)
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        try:
            spec.loader.exec_module(module)
        except BaseException:
            del sys.modules[name]
            raise
        return module
    return importlib.import_module(where)


def family_from_module(where: str) -> Family:
    """The ``FAMILY`` of a module (dotted name or .py path), renamed ``<its name>_<digest>``."""
    try:
        module = _import(where)
    except TaskSourceError:
        raise
    except Exception as e:  # noqa: BLE001 - a user's module: any import error is its to fix
        raise TaskSourceError(f"module:{where} does not import: {type(e).__name__}: {e}") from e
    family = getattr(module, "FAMILY", None)
    if not isinstance(family, Family):
        raise TaskSourceError(f"module:{where} defines no FAMILY = rewards.Family(name=..., max_difficulty=..., "
                              f"description=..., generator=..., normalizer=...) (found {type(family).__name__})")
    if type(family.max_difficulty) is not int or not 1 <= family.max_difficulty <= _MAX_LEVELS:
        raise TaskSourceError(f"module:{where}: max_difficulty must be an int in 1..{_MAX_LEVELS}, "
                              f"got {family.max_difficulty!r}")
    # Its code, then what it generates: the probes alone miss a version that differs only on inputs
    # they never draw (a changed answer for one question in a hundred).
    digest = hashlib.sha256(_source_bytes(module))
    for level in range(1, family.max_difficulty + 1):
        for seed in range(PROBE_SEEDS):
            first, again = (_probe(where, family, seed, level) for _ in range(2))
            if first != again:
                raise TaskSourceError(f"module:{where}: not deterministic: seed {seed} at level {level} gave "
                                      f"{first!r}, then {again!r} (draw only from the rng it is given)")
            # What it asks and how it scores: a changed normalizer is another family too.
            digest.update(json.dumps([level, seed, *first]).encode())
    return Family(name=_family_name(family.name, digest.hexdigest()), max_difficulty=family.max_difficulty,
                  description=f"{family.description} (module:{where})", generator=family.generator,
                  normalizer=family.normalizer)


def _source_bytes(module) -> bytes:
    """The module's own file (not what it imports): two copies of one file are one family."""
    path = getattr(module, "__file__", None)
    try:
        return Path(path).read_bytes() if path else b""
    except OSError:
        return b""


def _probe(where: str, family: Family, seed: int, level: int) -> tuple[str, str, tuple[str, ...]]:
    """(question, answer, what the normalizer makes of the answer and of a few other strings)."""
    try:
        out = family.generator(random.Random(seed), level)
    except Exception as e:  # noqa: BLE001
        raise TaskSourceError(f"module:{where}: the generator raised at seed {seed}, level {level}: "
                              f"{type(e).__name__}: {e}") from e
    if not (isinstance(out, tuple) and len(out) == 2 and all(isinstance(x, str) and x for x in out)):
        raise TaskSourceError(f"module:{where}: the generator must return (question, answer), two non-empty "
                              f"str; seed {seed}, level {level} gave {out!r:.200}")
    normals = []
    for text in (out[1], "", "not an answer 123", " 007 ", out[1].upper()):
        try:
            normal = family.normalizer(text)
        except Exception as e:  # noqa: BLE001
            raise TaskSourceError(f"module:{where}: the normalizer raised on {text!r:.80}: "
                                  f"{type(e).__name__}: {e} (it must take any str)") from e
        if not isinstance(normal, str):
            raise TaskSourceError(f"module:{where}: the normalizer must return a str, got {type(normal).__name__}")
        normals.append(normal)
    return (*out, tuple(normals))


# -- a JSONL dataset ----------------------------------------------------------------------------

def _items(path: Path) -> tuple[list[tuple[int, str, str]], str]:
    """(level, question, answer) of every line, and the scorer name the lines agree on."""
    where = f"jsonl:{path}"
    try:
        size = path.stat().st_size
    except OSError as e:
        raise TaskSourceError(f"{where}: {e.strerror or e}") from e
    if size > MAX_DATASET_BYTES:
        raise TaskSourceError(f"{where}: {size:,} bytes, more than {MAX_DATASET_BYTES:,} (it is read whole)")
    items, scorers = [], set()
    with path.open(encoding="utf-8", errors="strict") as f:
        try:
            lines = list(f)
        except UnicodeDecodeError as e:
            raise TaskSourceError(f"{where}: not UTF-8 ({e.reason} at byte {e.start})") from e
    for n, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError as e:
            raise TaskSourceError(f"{where} line {n}: not JSON ({e.msg})") from e
        if not isinstance(row, dict):
            raise TaskSourceError(f"{where} line {n}: expected an object {{\"question\": ..., \"answer\": ...}}")
        unknown = set(row) - {"question", "answer", "level", "scorer"}
        if unknown:
            raise TaskSourceError(f"{where} line {n}: unknown keys {sorted(unknown)} (question, answer, level, scorer)")
        q, a, level = row.get("question"), row.get("answer"), row.get("level", 1)
        if not (isinstance(q, str) and q.strip() and isinstance(a, str) and a.strip()):
            raise TaskSourceError(f"{where} line {n}: question and answer must be non-empty strings")
        if type(level) is not int or not 1 <= level <= _MAX_LEVELS:
            raise TaskSourceError(f"{where} line {n}: level must be an int in 1..{_MAX_LEVELS}, got {level!r}")
        scorer = row.get("scorer", "auto")
        if scorer not in SCORERS:
            raise TaskSourceError(f"{where} line {n}: unknown scorer {scorer!r}; one of {', '.join(SCORERS)}")
        scorers.add(scorer)
        items.append((level, q, a))
    if not items:
        raise TaskSourceError(f"{where}: no tasks in it")
    if len(scorers) > 1:
        raise TaskSourceError(f"{where}: lines name different scorers {sorted(scorers)}: one per file")
    return items, scorers.pop()


def family_from_jsonl(path: Path) -> Family:
    """A family that draws a dataset's items: at level d, item ``rng.randrange(n_d)`` of the
    items of that level, in file order. Its name is ``<file stem>_<digest of the items>``."""
    items, scorer = _items(path)
    by_level: dict[int, list[tuple[str, str]]] = {}
    for level, q, a in items:
        by_level.setdefault(level, []).append((q, a))
    top = max(by_level)
    missing = [d for d in range(1, top + 1) if d not in by_level]
    if missing:
        raise TaskSourceError(f"jsonl:{path}: levels run 1..{top} with none at {missing} (a node sampling a level "
                              f"must find tasks there)")
    content = json.dumps({"scorer": scorer, "items": items}, ensure_ascii=False, separators=(",", ":"))
    digest = hashlib.sha256(content.encode()).hexdigest()
    levels = {d: tuple(rows) for d, rows in by_level.items()}

    def generate(rng: random.Random, difficulty: int) -> tuple[str, str]:
        rows = levels[difficulty]
        return rows[rng.randrange(len(rows))]

    counts = ", ".join(f"level {d}: {len(levels[d])}" for d in sorted(levels))
    return Family(name=_family_name(path.stem, digest), max_difficulty=top,
                  description=f"{len(items)} tasks of jsonl:{path} ({counts}; scorer {scorer})",
                  generator=generate, normalizer=SCORERS[scorer])
