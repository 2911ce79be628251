"""swarm-node's one import name: ``swarm_node.node``, ``swarm_node.protocol``, ``swarm_node.policies``
and ``swarm_node.rewards`` are the repository's top-level folders node/, protocol/, policies/ and
rewards/.

Installed (a wheel, or an editable install), setuptools maps each folder under this package
(pyproject.toml's ``package-dir``): a wheel holds swarm_node/node/..., an editable install's finder
points ``swarm_node.node`` at the node/ folder. Run from a source tree with no install (pytest from
the repository root, ``python -m swarm_node`` there), this package's folder sits beside the four, so
its ``__path__`` also reaches the repository root and ``swarm_node.node`` is the node/ folder there.
Nothing imports the bare names ``node``, ``protocol``, ``policies`` or ``rewards``: a user's own
``node.py`` or the registry's ``node`` package is never ours, nor ours theirs.
"""

from pathlib import Path as _Path

_SUBPACKAGES = ("node", "protocol", "policies", "rewards")
_here = _Path(__file__).parent  # not resolved: a strict editable install links files into a tree of its own
# A source tree: the four folders are this folder's siblings, not its children (a wheel's layout).
if not (_here / "node").is_dir() and all((_here.parent / p / "__init__.py").is_file() for p in _SUBPACKAGES):
    __path__.append(str(_here.parent))  # noqa: F821 (a package's __path__)
del _Path, _SUBPACKAGES, _here
