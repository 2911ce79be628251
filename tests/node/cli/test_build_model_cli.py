"""``swarm-node build-model NAME``: a name it has nothing to build for (a hub id, a model folder),
``--out`` with anything but the default model, and a path that names nothing are the user's
input: exit 2 with one line that says why, before anything is fetched, built or cached."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from tests.helpers.paths import ROOT

NOTHING_TO_BUILD = "there is nothing to build; pass default, a registry model or a .gguf file"


@pytest.mark.subprocess
@pytest.mark.parametrize("args, why", [
    (["org/name"], ["build-model org/name:", NOTHING_TO_BUILD]),
    (["{tmp}/folder"], ["build-model {tmp}/folder:", NOTHING_TO_BUILD]),
    (["smollm2-135m-instruct", "--out", "{tmp}/out"], ["build-model --out writes the embedded default model only"]),
    (["./missing.gguf"], ["./missing.gguf: no such file or folder"]),
])
def test_a_name_with_nothing_to_build_exits_2_saying_why_and_fetches_nothing(tmp_path, args, why):
    (tmp_path / "folder").mkdir()
    (tmp_path / "folder" / "config.json").write_text("{}")
    home = tmp_path / "home"
    env = {**os.environ, "SWARM_NODE_HOME": str(home), "PYTHONPATH": str(ROOT)}
    p = subprocess.run([sys.executable, "-m", "swarm_node.node.cli", "build-model", *(a.format(tmp=tmp_path) for a in args)],
                       cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    assert p.returncode == 2, p.stderr[-3000:]
    assert all(w.format(tmp=tmp_path) in p.stderr for w in why), p.stderr[-3000:]
    assert len(p.stderr.splitlines()) == 1 and "Traceback" not in p.stderr, p.stderr[-3000:]  # one line, no trace
    assert p.stdout == ""  # no folder printed: there is none
    assert not home.exists()  # the registry model above was neither fetched nor cached
