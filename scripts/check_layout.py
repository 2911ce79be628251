"""The project's layout, checked: module sizes, the direction of every import, and the package maps.

    python scripts/check_layout.py            prints the sizes, the layers and stale maps; exit 1 on a violation
    python scripts/check_layout.py --map      prints the module map docs/architecture.md embeds

Modules are named by their import names: the folders node/, protocol/, policies/ and rewards/ are
``swarm_node.node`` ... (swarm_node/__init__.py), written below without the ``swarm_node.``.
Layers, lowest first (a module may import its own layer and the ones below, never one above):

    protocol < rewards < policies < node base < node.transport < node.config < node.checkpoint
             < node.evaluate < node.broadcast < node.swarm < node.run < node.gpu < node.sim
             < node.cli < swarm_node (its ``__main__``)

``node base`` is node.errors, node.clock, node.daemon_thread and node.observe (the leaves every
layer may report through). Beyond the layers:

- ``rewards`` imports only ``protocol.task_id`` and ``protocol.errors`` of ``protocol``;
- a carrier (node/transport/<hivemind|libp2p|mqtt>/) never imports another carrier;
- node.swarm, node.run, node.broadcast, node.config, node.checkpoint, node.evaluate and
  node.cli.doctor import no carrier folder, and no module outside the
  carrier registry (node/transport/carriers.py) and the carriers' own folders spells a carrier's
  name as a string (docstrings aside): they choose a carrier by its traits in the registry;
- nothing but ``node.cli`` imports ``node.sim``;
- nothing imports the bare names ``node``, ``protocol``, ``policies``, ``rewards``: only
  ``swarm_node.node`` ... (a bare import would load a module twice, or someone else's package).

Every import counts, lazy ones inside functions too.

Each package's ``__init__.py`` docstring holds its map: a line per module (``x.py``) or subpackage
(``x/``) saying what it does. A map is current when

- every child of the package (each ``x.py`` but ``__init__.py``, ``__main__.py`` included; each
  folder ``x/`` holding an ``__init__.py``) is named in the docstring: ``x.py`` (``x/`` for a
  subpackage) appears in it as a whole word, with no letter, digit, ``_``, ``.`` or ``/`` just
  before it and, for ``x.py``, no letter, digit or ``_`` just after it (so ``families/`` in
  ``families/family.py`` names the subpackage, and ``protocol/manifest.py`` names nothing here);
- every map entry names a child: an entry is a docstring line whose first word is ``x.py`` or
  ``x/`` (``x`` letters, digits and ``_``; the word ends at a space, a comma or the line's end),
  so paths such as ``protocol/manifest.py`` or ``docs/architecture.md`` at a line's start are
  references, not entries.

tests/test_layout.py runs all three checks.
"""

from __future__ import annotations

import argparse
import ast
import re
import sys
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = "swarm_node"  # the one import name
FOLDERS = ("protocol", "rewards", "policies", "node")  # swarm_node.<folder> is the repository's <folder>/
MAX_LINES = 450
# Modules allowed past MAX_LINES, each with the reason (empty: none).
SIZE_EXCEPTIONS: dict[str, str] = {}

LAYERS: list[tuple[str, ...]] = [
    ("swarm_node.protocol",),
    ("swarm_node.rewards",),
    ("swarm_node.policies",),
    ("swarm_node.node.errors", "swarm_node.node.clock", "swarm_node.node.daemon_thread", "swarm_node.node.observe",
     "swarm_node.node"),
    ("swarm_node.node.transport",),
    ("swarm_node.node.config",),
    ("swarm_node.node.checkpoint",),
    ("swarm_node.node.evaluate",),
    ("swarm_node.node.broadcast",),
    ("swarm_node.node.swarm",),
    ("swarm_node.node.run",),
    ("swarm_node.node.gpu",),
    ("swarm_node.node.sim",),
    ("swarm_node.node.cli",),
    ("swarm_node",),  # the package itself and ``python -m swarm_node``
]
CARRIERS = ("swarm_node.node.transport.hivemind", "swarm_node.node.transport.libp2p", "swarm_node.node.transport.mqtt")
# What knows no carrier: they reach one through the carrier registry (node/transport/carriers.py).
CARRIER_BLIND = ("swarm_node.node.swarm", "swarm_node.node.run", "swarm_node.node.broadcast", "swarm_node.node.config",
                 "swarm_node.node.checkpoint", "swarm_node.node.evaluate", "swarm_node.node.cli.doctor")
CARRIER_NAMES = ("hivemind", "libp2p", "mqtt", "memory")  # the registry's rows' names
# Where a carrier's name may be spelled as a string: the registry, the carriers' own folders and
# the memory carrier's module.
NAMES_AT_HOME = ("node/transport/carriers.py", "node/transport/hivemind/", "node/transport/libp2p/",
                 "node/transport/mqtt/", "node/transport/memory.py")
# (file, literal) -> where that string is not a carrier's name, and why: "logger" (an argument of
# getLogger) or "key" (a dict key); anywhere else in the file it is still caught.
NOT_A_CARRIER = {("node/observe/logs.py", "hivemind"): ("logger", "the hivemind library's logger"),
                 ("node/run/trainer.py", "memory"): ("key", "status.json's memory block (RAM)")}
REWARDS_MAY_IMPORT = ("swarm_node.protocol.task_id", "swarm_node.protocol.errors")


def _within(module: str, prefix: str) -> bool:
    return module == prefix or module.startswith(prefix + ".")


def layer_of(module: str) -> int:
    """The layer a project module sits in (the longest matching prefix wins)."""
    best, best_len = -1, -1
    for i, prefixes in enumerate(LAYERS):
        for p in prefixes:
            if _within(module, p) and len(p) > best_len:
                best, best_len = i, len(p)
    if best < 0:
        raise ValueError(f"{module} is in no layer: add it to LAYERS in scripts/check_layout.py")
    return best


def module_name(path: Path) -> str:
    """A file's import name: node/run/trainer.py is ``swarm_node.node.run.trainer``."""
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts if parts[0] == PACKAGE else [PACKAGE, *parts])


def imports_of(path: Path) -> list[tuple[int, str]]:
    """(line, module) of every project import in a file, lazy ones included."""
    tree = ast.parse(path.read_text(), str(path))
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            # ``from pkg import mod`` names a module when mod is one; the check uses the deepest.
            names = []
            for a in node.names:
                full = f"{node.module}.{a.name}"
                names.append(full if _is_module(full) else node.module)
        else:
            continue
        found += [(node.lineno, n) for n in names if n.split(".")[0] in (PACKAGE, *FOLDERS)]
    return found


def _is_module(dotted: str) -> bool:
    parts = dotted.split(".")
    if parts[0] == PACKAGE and len(parts) > 1 and parts[1] in FOLDERS:
        parts = parts[1:]  # swarm_node.node... is the node/ folder
    base = ROOT.joinpath(*parts)
    return base.with_suffix(".py").is_file() or (base / "__init__.py").is_file()


@dataclass(frozen=True)
class Violation:
    where: str
    line: int
    imported: str
    why: str

    def __str__(self) -> str:
        return f"{self.where}:{self.line} imports {self.imported}: {self.why}"


def violations_of(module: str, imports: list[tuple[int, str]]) -> list[Violation]:
    out = []
    mine = layer_of(module)
    for line, imp in imports:
        if imp.split(".")[0] in FOLDERS:
            out.append(Violation(module, line, imp, f"a bare name: import {PACKAGE}.{imp}"))
            continue
        there = layer_of(imp)
        if there > mine:
            out.append(Violation(module, line, imp, f"upward ({LAYERS[mine][0]} below {LAYERS[there][0]})"))
        if _within(module, "swarm_node.rewards") and _within(imp, "swarm_node.protocol") and not any(
                _within(imp, ok) for ok in REWARDS_MAY_IMPORT):
            out.append(Violation(module, line, imp, "rewards imports only protocol.task_id and protocol.errors"))
        mine_c = next((c for c in CARRIERS if _within(module, c)), None)
        theirs_c = next((c for c in CARRIERS if _within(imp, c)), None)
        if mine_c and theirs_c and mine_c != theirs_c:
            out.append(Violation(module, line, imp, "a carrier imports another carrier"))
        if theirs_c and any(_within(module, m) for m in CARRIER_BLIND):
            out.append(Violation(module, line, imp, "this folder imports no carrier folder: ask "
                                                    "node/transport/carriers.py"))
        if _within(imp, "swarm_node.node.sim") and not (_within(module, "swarm_node.node.sim")
                                                        or _within(module, "swarm_node.node.cli")):
            out.append(Violation(module, line, imp, "only node.cli imports node.sim"))
    return out


def carrier_names_spelled(root: Path = ROOT, folders: tuple[str, ...] = FOLDERS) -> list[str]:
    """``file:line: 'name'`` for each carrier's name written as a string (docstrings aside) outside
    ``NAMES_AT_HOME``: everywhere else a carrier is chosen by its traits in the registry."""
    out = []
    for folder in folders:
        for path in sorted((root / folder).rglob("*.py")):
            rel = path.relative_to(root).as_posix()
            if rel.startswith(NAMES_AT_HOME):
                continue
            tree = ast.parse(path.read_text(), rel)
            docs = {id(n.body[0].value) for n in ast.walk(tree)
                    if isinstance(n, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))
                    and n.body and isinstance(n.body[0], ast.Expr) and isinstance(n.body[0].value, ast.Constant)}
            where = {**{id(k): "key" for n in ast.walk(tree) if isinstance(n, ast.Dict) for k in n.keys if k is not None},
                     **{id(a): "logger" for n in ast.walk(tree) if isinstance(n, ast.Call)
                        and getattr(n.func, "attr", getattr(n.func, "id", "")) == "getLogger" for a in n.args}}
            out += [f"{rel}:{n.lineno}: {n.value!r}: choose the carrier by its traits (node/transport/carriers.py)"
                    for n in ast.walk(tree) if isinstance(n, ast.Constant) and n.value in CARRIER_NAMES
                    and id(n) not in docs and NOT_A_CARRIER.get((rel, n.value), ("",))[0] != where.get(id(n))]
    return out


def project_files() -> list[Path]:
    """swarm_node/ first, then the four folders it holds."""
    return [p for group in ([PACKAGE], sorted(FOLDERS)) for p in sorted(p for folder in group
                                                                       for p in (ROOT / folder).rglob("*.py"))]


def check() -> tuple[list[tuple[str, int]], list[Violation], list[str]]:
    """(module sizes, import violations, modules over MAX_LINES without an exception)."""
    sizes, bad, big = [], [], []
    for path in project_files():
        mod = module_name(path)
        n = len(path.read_text().splitlines())
        sizes.append((mod, n))
        bad += violations_of(mod, imports_of(path))
        if n > MAX_LINES and mod not in SIZE_EXCEPTIONS:
            big.append(f"{mod}: {n} lines (over {MAX_LINES})")
    return sizes, bad, big


def _children(package: Path) -> list[str]:
    """A package's direct children as its map names them: ``x.py`` modules and ``x/`` subpackages."""
    modules = [p.name for p in package.glob("*.py") if p.name != "__init__.py"]
    subpackages = [p.name + "/" for p in package.iterdir() if (p / "__init__.py").is_file()]
    return sorted(modules + subpackages)


def _named(child: str, doc: str) -> bool:
    """Whether a docstring names a child (``x.py`` or ``x/``) as a whole word (the module docstring's rule)."""
    after = "" if child.endswith("/") else r"(?!\w)"
    return re.search(r"(?<![\w./])" + re.escape(child) + after, doc) is not None


MAP_ENTRY = re.compile(r"^[ \t]*(\w+(?:\.py|/))(?=[\s,]|$)", re.M)  # a line whose first word is x.py or x/


def stale_package_maps(root: Path = ROOT, folders: tuple[str, ...] = FOLDERS) -> list[str]:
    """Every package under ``folders`` whose ``__init__`` docstring leaves a child out of its map or
    has an entry naming no child (the rule is this module's docstring's), one line each."""
    out = []
    for init in sorted(p for folder in folders for p in (root / folder).rglob("__init__.py")):
        package, where = init.parent, init.relative_to(root).as_posix()
        doc = ast.get_docstring(ast.parse(init.read_text(), str(init))) or ""
        children = _children(package)
        out += [f"{where}: its map leaves out {c}" for c in children if not _named(c, doc)]
        out += [f"{where}: its map names {e}, which is not in {package.relative_to(root).as_posix()}/"
                for e in MAP_ENTRY.findall(doc) if e not in children]
    return out


def first_line(path: Path) -> str:
    """A module's role: the first sentence of its docstring's first paragraph."""
    doc = ast.get_docstring(ast.parse(path.read_text())) or ""
    para = " ".join(doc.split("\n\n")[0].split())
    return para.split(". ")[0].rstrip(".")


def module_map() -> str:
    """Every module, folder by folder, with its import name and its docstring's first sentence (a
    markdown table)."""
    rows = ["| module | its import name | its role (the first sentence of its docstring) |", "|---|---|---|"]
    for path in project_files():
        rel = path.relative_to(ROOT).as_posix()
        if path.name == "__init__.py":
            rel = rel.removesuffix("__init__.py")
        rows.append(f"| `{rel}` | `{module_name(path)}` | {first_line(path).replace('|', '/')} |")
    return "\n".join(rows) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--top", type=int, default=25, help="how many of the largest modules to print")
    parser.add_argument("--map", action="store_true", help="print the module map (markdown) and exit")
    args = parser.parse_args(argv)
    if args.map:
        print(module_map(), end="")
        return 0
    sizes, bad, big = check()
    print(f"{len(sizes)} modules, {sum(n for _, n in sizes)} lines; the largest:")
    for mod, n in sorted(sizes, key=lambda s: -s[1])[: args.top]:
        print(f"  {n:5d}  {mod}  (layer {LAYERS[layer_of(mod)][0]})")
    for mod, why in SIZE_EXCEPTIONS.items():
        print(f"  allowed over {MAX_LINES}: {mod}: {why}")
    stale = stale_package_maps()
    spelled = carrier_names_spelled()
    for line in [str(v) for v in bad] + big + stale + spelled:
        print("VIOLATION", line)
    failed = bad or big or stale or spelled
    print("ok" if not failed else
          f"{len(bad)} import, {len(big)} size, {len(stale)} package map and {len(spelled)} carrier name violation(s)")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
