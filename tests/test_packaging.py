"""One import name: swarm-node installs only ``swarm_node`` (its ``node``, ``protocol``, ``policies`` and
``rewards`` are ``swarm_node.node`` ...: swarm_node/__init__.py), so it neither shadows nor is shadowed
by the registry's packages of those names or a user's ``node.py``.

pyproject.toml lists every package; nothing in the code, tests, scripts or docs imports a bare name;
the CLI runs from a folder holding a ``node.py`` and a ``protocol.py`` with none of the bare names
loaded; and the wheel, installed into a fresh virtualenv beside stand-ins for the registry's
``node``, ``protocol``, ``policies`` and ``rewards``, answers ``swarm-node --help`` and trains a step."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path

import pytest

from tests.helpers.paths import ROOT

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

FOLDERS = ("node", "protocol", "policies", "rewards")  # the repository's folders, swarm_node.<folder>
_BARE = "|".join(FOLDERS)
# A bare name imported or run anywhere: an import statement (in code or in a code string), or -m.
BARE_USES = [re.compile(rf"(?<![\w.])from ({_BARE})(\.\w+)* import "),
             re.compile(rf"(?<![\w.])import ({_BARE})(\.\w+)*\s*($|,|#|as\b)", re.M),
             re.compile(rf"-m[\"',\s]+({_BARE})\.")]
TRAIN_ONE_STEP = ["--train.steps", "1", "--run.progress", "off", "--run.plot", "false"]


def _packages_on_disk() -> list[str]:
    found = ["swarm_node"]
    for folder in FOLDERS:
        for init in sorted((ROOT / folder).rglob("__init__.py")):
            found.append(".".join(["swarm_node", *init.parent.relative_to(ROOT).parts]))
    return sorted(found)


def test_pyproject_installs_every_package_under_the_one_name():
    tool = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    assert tool["package-dir"] == {"swarm_node": "swarm_node", **{f"swarm_node.{f}": f for f in FOLDERS}}
    assert sorted(tool["packages"]) == _packages_on_disk(), \
        "pyproject.toml's [tool.setuptools] packages must list every package (a new folder with __init__.py)"
    scripts = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["scripts"]
    assert scripts == {"swarm-node": "swarm_node.node.cli:main"}


def _text_files() -> list[Path]:
    me = Path(__file__).resolve()
    py = [p for top in ("swarm_node", *FOLDERS, "tests", "scripts") for p in (ROOT / top).rglob("*.py")]
    docs = [ROOT / "README.md", ROOT / "Makefile", *(ROOT / "docs").rglob("*.md")]
    return [p for p in py + docs if p.resolve() != me and p.is_file()]


def test_nothing_imports_or_runs_a_bare_name():
    bad = []
    for path in _text_files():
        for n, line in enumerate(path.read_text(errors="replace").splitlines(), 1):
            if any(r.search(line) for r in BARE_USES):
                bad.append(f"{path.relative_to(ROOT)}:{n}: {line.strip()}")
    assert not bad, "import swarm_node.<name>, never the bare name:\n" + "\n".join(bad)


def _no_bare_modules_code(then: str) -> str:
    return (f"import sys\n{then}\n"
            f"bare = sorted(m for m in sys.modules if m.split('.')[0] in {FOLDERS!r})\n"
            "assert not bare, bare\n")


@pytest.mark.subprocess
def test_the_cli_runs_from_a_folder_holding_a_node_py_and_a_protocol_py(tiny_model_dir, tmp_path):
    # A user's folder: node.py and protocol.py (and policies/, rewards.py) that fail when imported.
    # `python -m` and `python -c` put the working folder first on sys.path.
    here = tmp_path / "mine"
    (here / "policies").mkdir(parents=True)
    for f in (here / "node.py", here / "protocol.py", here / "policies" / "__init__.py", here / "rewards.py"):
        f.write_text(f"raise ImportError('the user\\'s own {f.relative_to(here)} was imported')\n")
    env = dict(os.environ, PYTHONPATH=str(ROOT))  # swarm_node from the source tree where not installed
    r = subprocess.run([sys.executable, "-m", "swarm_node", "--help"], cwd=here, env=env, capture_output=True,
                       text=True, timeout=120)
    assert r.returncode == 0, r.stderr[-3000:]
    assert r.stdout.startswith("usage: swarm-node")

    # One training step through the CLI's main, then: none of the bare names was loaded.
    run = _no_bare_modules_code(
        "from swarm_node.node.cli import main\n"
        f"rc = main(['train', '--model.name', {str(tiny_model_dir)!r}, '--run.dir', 'run', *{TRAIN_ONE_STEP!r}])\n"
        "assert rc == 0, rc")
    r = subprocess.run([sys.executable, "-c", run], cwd=here, env=env, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    assert json.loads(r.stdout)["steps"] == 1


# -- the wheel, in a fresh virtualenv -----------------------------------------------------------

def _build_wheel(out: Path, tmp_path: Path) -> Path:
    """The wheel of a copy of the tree (a build writes build/ and *.egg-info beside its sources)."""
    src = tmp_path / "src"
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc")
    for name in ("swarm_node", *FOLDERS):
        shutil.copytree(ROOT / name, src / name, ignore=ignore)
    for name in ("pyproject.toml", "README.md"):
        shutil.copy2(ROOT / name, src / name)
    r = subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-index", "--no-build-isolation",
                        "-w", str(out), str(src)], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    (wheel,) = out.glob("swarm_node-*.whl")
    return wheel


def _fresh_venv(where: Path) -> tuple[Path, Path]:
    """A virtualenv without swarm-node: this one's dependencies (torch ... and pip) are visible
    through a folder of links to its site-packages, less any swarm-node install (an editable
    install's finder included) and any top-level node, protocol, policies, rewards. Returns
    (its python, its site-packages)."""
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(where)], check=True, timeout=120)
    site = where / "lib" / f"python{sys.version_info.major}.{sys.version_info.minor}" / "site-packages"
    assert site.is_dir(), site
    deps = where / "outer-deps"
    deps.mkdir()
    skip = re.compile(rf"^(swarm_node|swarm-node|__editable__)|^({_BARE})(\.py)?$", re.I)
    for lib in dict.fromkeys([sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"]]):
        for entry in Path(lib).iterdir():
            if not skip.search(entry.name) and not (deps / entry.name).exists():
                (deps / entry.name).symlink_to(entry)
    (site / "outer_deps.pth").write_text(f"import site; site.addsitedir({str(deps)!r})\n")
    return where / "bin" / "python", site


@pytest.mark.subprocess
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the venv layout (bin/, lib/pythonX.Y) is POSIX's")
def test_the_wheel_beside_the_registrys_node_protocol_policies_and_rewards(tiny_model_dir, tmp_path):
    pytest.importorskip("setuptools", minversion="77")  # pyproject's SPDX license; torch needs it too
    wheel = _build_wheel(tmp_path / "dist", tmp_path)
    with zipfile.ZipFile(wheel) as z:
        names = z.namelist()
    assert {n.split("/")[0] for n in names if not n.split("/")[0].endswith(".dist-info")} == {"swarm_node"}
    ours = sorted(p.relative_to(ROOT).as_posix() for top in ("swarm_node", *FOLDERS) for p in (ROOT / top).rglob("*.py"))
    assert sorted(n.removeprefix("swarm_node/") for n in names if n.endswith(".py")) == \
        sorted(p.removeprefix("swarm_node/") for p in ours)

    python, site = _fresh_venv(tmp_path / "venv")
    log = tmp_path / "stand-ins.log"
    for name in FOLDERS:  # the registry's packages of those names, as far as an import can tell
        (site / name).mkdir()
        (site / name / "__init__.py").write_text(
            f"import os\nWHO = 'stand-in {name}'\n"
            f"with open(os.environ['STAND_IN_LOG'], 'a') as f:\n    f.write({name!r} + '\\n')\n")
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV")}
    env.update(STAND_IN_LOG=str(log), PATH=f"{python.parent}{os.pathsep}{env.get('PATH', '')}")
    r = subprocess.run([str(python), "-m", "pip", "install", "-q", "--no-deps", "--no-index", str(wheel)],
                       cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    exe = python.parent / "swarm-node"

    r = subprocess.run([str(exe), "--help"], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr[-3000:]
    assert r.stdout.startswith("usage: swarm-node")
    r = subprocess.run([str(exe), "train", "--model.name", str(tiny_model_dir), "--run.dir", str(tmp_path / "run"),
                        *TRAIN_ONE_STEP], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    assert json.loads(r.stdout)["steps"] == 1
    assert not log.exists(), f"swarm-node imported a stand-in: {log.read_text()}"

    # Each name is still the registry's, and swarm_node is the wheel's (not the source tree's).
    check = ("import node, protocol, policies, rewards, swarm_node, swarm_node.node.cli\n"
             f"assert [m.WHO for m in (node, protocol, policies, rewards)] == {[f'stand-in {n}' for n in FOLDERS]!r}\n"
             "import swarm_node.node, swarm_node.protocol, swarm_node.policies, swarm_node.rewards\n"
             "assert swarm_node.node is not node and swarm_node.__path__ == [swarm_node.__path__[0]]\n"
             f"assert swarm_node.__file__.startswith({str(site)!r}), swarm_node.__file__\n"
             f"assert swarm_node.node.cli.__file__.startswith({str(site / 'swarm_node' / 'node')!r})\n")
    r = subprocess.run([str(python), "-c", check], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr[-3000:]
    assert log.read_text().split() == list(FOLDERS)
    r = subprocess.run([str(python), "-m", "swarm_node", "--help"], cwd=tmp_path, env=env, capture_output=True,
                       text=True, timeout=120)
    assert r.returncode == 0 and r.stdout.startswith("usage: swarm-node"), r.stderr[-3000:]
