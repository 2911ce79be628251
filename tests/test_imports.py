"""Every module imports on its own (no hidden import-order dependencies or cycles), and the CLI
module does not pull in torch, so ``swarm-node --help`` and config errors answer instantly.

One interpreter imports the heavy third-party libraries once, then forks a fresh child per project
module: each child starts with none of the project imported, as its own interpreter would, without
paying for torch again (about 100 interpreters cost minutes on 2 cores)."""

from __future__ import annotations

import json
import pkgutil
import subprocess
import sys

import pytest

from tests.helpers.paths import ROOT

pytestmark = pytest.mark.subprocess

FOLDERS = ("node", "protocol", "policies", "rewards")  # swarm_node.<folder>: swarm_node/__init__.py


def _modules() -> list[str]:
    out = ["swarm_node", "swarm_node.__main__"]
    for folder in FOLDERS:
        out.append(f"swarm_node.{folder}")
        for info in pkgutil.walk_packages([str(ROOT / folder)], prefix=f"swarm_node.{folder}."):
            out.append(info.name)
    return out


# Preloads only third-party libraries (never hivemind or libp2p: they cannot share a process), then
# forks per module; prints {module: traceback or ""}.
_PROBE = r"""
import json, os, sys, traceback
import torch, transformers  # noqa: F401
results, running = {}, {}  # running: pid -> (module, read end)
pending = list(sys.argv[1:])

def reap():
    pid, status = os.wait()
    module, r = running.pop(pid)
    chunks = []
    while chunk := os.read(r, 65536):
        chunks.append(chunk)
    os.close(r)
    results[module] = b"".join(chunks).decode() or ("" if status == 0 else f"child exited with {status}")

while pending or running:
    # As many children at once as there are cores: each one mostly imports, on its own core.
    while pending and len(running) < (os.cpu_count() or 1):
        module = pending.pop(0)
        r, w = os.pipe()
        pid = os.fork()
        if pid == 0:
            os.close(r)
            try:
                __import__(module)
                out = b""
            except BaseException:
                out = traceback.format_exc().encode()
            os.write(w, out[-60000:])  # within a pipe's buffer: the parent reads only once it exits
            os._exit(0)
        os.close(w)
        running[pid] = (module, r)
    reap()
print(json.dumps(results))
"""


@pytest.fixture(scope="module")
def import_results() -> dict[str, str]:
    r = subprocess.run([sys.executable, "-c", _PROBE, *_modules()], cwd=ROOT, capture_output=True, text=True,
                       timeout=600)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("module", _modules())
def test_module_imports_alone(module, import_results):
    assert import_results[module] == "", import_results[module]


def test_cli_and_config_do_not_import_torch():
    code = "import sys, swarm_node.node.cli, swarm_node.node.config.config; assert 'torch' not in sys.modules, 'torch imported'"
    r = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
