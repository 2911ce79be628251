"""A stand-in registry model: a small wheel built here, served to the real pip from a folder
(``pip_args``), and a stand-in converter; run as ``python -m tests.helpers.fake_registry`` it is
one process asking for the model, for the tests of builds killed or run at once
(tests/policies/test_registry_models.py).

The wheel is a real one (``*.dist-info`` with METADATA, WHEEL and RECORD), so pip takes it as it
would take the registry's; its member stands in for the GGUF file, and ``fake_convert`` writes a
folder from it without reading it as a model (the real conversion takes a real model: another test).
"""

from __future__ import annotations

import argparse
import base64
import dataclasses
import hashlib
import json
import os
import sys
import zipfile
from pathlib import Path
from typing import Callable

from swarm_node.policies.registry_models import RegistryModel

PACKAGE, VERSION = "swarm-node-fake-model", "0.1.0"
MEMBER = "swarm_node_fake_model/fake-model.Q4_1.gguf"
# A few KB that are not all one byte, so a member cut short or read from the wrong place differs.
PAYLOAD = b"GGUF" + bytes(range(256)) * 16


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def make_wheel(folder: Path, member: str = MEMBER, payload: bytes = PAYLOAD) -> Path:
    """A valid wheel of ``PACKAGE`` ``VERSION`` holding ``payload`` at ``member``, in ``folder``."""
    folder.mkdir(parents=True, exist_ok=True)
    dist = f"{PACKAGE.replace('-', '_')}-{VERSION}"
    files = {
        member: payload,
        f"{dist}.dist-info/METADATA": f"Metadata-Version: 2.1\nName: {PACKAGE}\nVersion: {VERSION}\n".encode(),
        f"{dist}.dist-info/WHEEL": b"Wheel-Version: 1.0\nGenerator: swarm-node-tests\nRoot-Is-Purelib: true\n"
                                   b"Tag: py3-none-any\n",
    }
    record = "".join(f"{name},sha256={_record_digest(data)},{len(data)}\n" for name, data in files.items())
    files[f"{dist}.dist-info/RECORD"] = (record + f"{dist}.dist-info/RECORD,,\n").encode()
    wheel = folder / f"{dist}-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w", zipfile.ZIP_DEFLATED) as z:
        for name, data in files.items():
            z.writestr(name, data)
    return wheel


def _record_digest(data: bytes) -> str:
    # RECORD's form (PEP 376/427): urlsafe base64 of the sha256, without padding.
    return base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()


def fake_entry(wheel: Path, payload: bytes = PAYLOAD, **changes) -> RegistryModel:
    """A registry entry for ``wheel``, pinned to its real digests unless ``changes`` say otherwise."""
    entry = RegistryModel(name="fake-model", package=PACKAGE, version=VERSION,
                          wheel_sha256=sha256(wheel.read_bytes()), member=MEMBER, member_sha256=sha256(payload),
                          hub_id="someorg/fake-model", license="MIT", about="a stand-in for the tests")
    return dataclasses.replace(entry, **changes)


def find_links(wheel_dir: Path) -> tuple[str, ...]:
    """pip's arguments that serve the wheels of ``wheel_dir`` and nothing else (no index, no network)."""
    return ("--no-index", "--find-links", str(wheel_dir))


def fake_convert(gguf: Path, out: Path, say: Callable[[str], None]) -> dict:
    """A converter's part: a config.json and the bytes it was given, and a description."""
    data = gguf.read_bytes()
    (out / "config.json").write_text(json.dumps({"model_type": "fake"}))
    (out / "received.gguf").write_bytes(data)  # what the converter got, for the test to compare
    return {"converted_by": "fake_convert", "received_name": gguf.name, "received_sha256": sha256(data)}


def main() -> None:
    from swarm_node.policies import registry_models
    from tests.helpers.wait import wait_until

    ap = argparse.ArgumentParser()
    ap.add_argument("--entry", required=True, help="the RegistryModel's fields, as JSON")
    ap.add_argument("--home", type=Path, required=True)
    ap.add_argument("--wheels", type=Path, required=True, help="the folder pip takes the wheel from")
    ap.add_argument("--started", type=Path, required=True, help="the converter appends this process's pid here")
    ap.add_argument("--go", type=Path, required=True, help="... then waits for this file before it writes")
    a = ap.parse_args()
    entry = RegistryModel(**json.loads(a.entry))
    registry_models.REGISTRY_MODELS = {entry.name: entry}

    def convert(gguf: Path, out: Path, say: Callable[[str], None]) -> dict:
        with open(a.started, "a") as f:  # appended, so a test counts how many conversions started
            f.write(f"{os.getpid()}\n")
        # Long enough for any test; an orphan left by a test that failed still ends.
        wait_until(a.go.exists, 300, "the test's go file")
        return fake_convert(gguf, out, say)

    path = registry_models.ensure_registry_model(entry.name, home=a.home, pip_args=find_links(a.wheels),
                                                 convert=convert,
                                                 progress=lambda m: print(m, file=sys.stderr, flush=True))
    print(path, flush=True)


if __name__ == "__main__":
    main()
