"""Every module imports on its own (no hidden import-order dependencies or cycles), and the CLI
module does not pull in torch, so ``swarm-node --help`` and config errors answer instantly."""

from __future__ import annotations

import pkgutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers.paths import ROOT
PACKAGES = ("node", "protocol", "policies", "rewards")


def _modules() -> list[str]:
    out = []
    for pkg in PACKAGES:
        out.append(pkg)
        for info in pkgutil.walk_packages([str(ROOT / pkg)], prefix=f"{pkg}."):
            out.append(info.name)
    return out


@pytest.mark.parametrize("module", _modules())
def test_module_imports_alone(module):
    r = subprocess.run([sys.executable, "-c", f"import {module}"], cwd=ROOT, capture_output=True, text=True)
    assert r.returncode == 0, r.stderr


def test_cli_and_config_do_not_import_torch():
    code = "import sys, node.cli, node.run.config; assert 'torch' not in sys.modules, 'torch imported'"
    r = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
