"""node/run/preflight.py's model check: a hub id that is not cached, where the Hub cannot be reached,
is one clear message within seconds, not a minute of retries printed twice."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from swarm_node.node.errors import ConfigError
from swarm_node.node.run.preflight import check_model_source
from tests.helpers.paths import ROOT


def test_a_hub_id_offline_and_not_cached_is_refused_naming_the_way_out(monkeypatch, tmp_path):
    from huggingface_hub import constants

    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path / "empty-cache"))
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    with pytest.raises(ConfigError) as e:
        check_model_source("someorg/not-a-cached-model")
    msg = str(e.value)
    assert "not in the Hugging Face cache" in msg and "HF_HUB_OFFLINE is set" in msg
    assert "--model.name default" in msg and "local model folder" in msg


def test_the_embedded_model_and_local_folders_need_no_hub(monkeypatch, tiny_model_dir):
    from huggingface_hub import constants

    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    for name in ("default", str(tiny_model_dir), "smollm2-135m-instruct"):  # the last: fetched from the registry
        check_model_source(name)


def test_a_name_that_names_no_model_is_refused_before_anything_loads(tmp_path, tiny_model_dir):
    # One rule (exit 2, a ConfigError): a missing path, a folder that is not a model, another file.
    (tmp_path / "weights.bin").write_bytes(b"x")
    cases = {"./no/such/folder": "no such file or folder", str(tmp_path / "missing.gguf"): "no such file",
             str(tmp_path): "not a Hugging Face model folder \\(no config.json", str(tmp_path / "weights.bin"): "not a .gguf"}
    for name, why in cases.items():
        with pytest.raises(ConfigError, match=why):
            check_model_source(name)


@pytest.mark.subprocess
def test_a_node_without_the_hub_fails_at_once_with_one_message(tmp_path):
    env = {k: v for k, v in os.environ.items() if k != "HF_HUB_OFFLINE"}
    # Nothing listens on port 9: the Hub "cannot be reached" on any machine, with or without a network.
    env.update(HF_ENDPOINT="http://127.0.0.1:9", HF_HOME=str(tmp_path / "hf"), HF_HUB_CACHE=str(tmp_path / "hf" / "hub"))
    p = subprocess.run([sys.executable, "-m", "swarm_node.node.cli", "train", "--model.name", "someorg/not-a-cached-model",
                        "--run.dir", str(tmp_path / "run"), "--train.steps", "1"],
                       cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    assert p.returncode == 2, p.stderr[-3000:]
    assert "--model.name someorg/not-a-cached-model: not a local folder, not in the Hugging Face cache" in p.stderr
    assert "127.0.0.1:9" in p.stderr and "Retrying" not in p.stderr and "Traceback" not in p.stderr
    assert not (tmp_path / "run").exists()


@pytest.mark.subprocess
def test_a_cached_hub_model_loads_offline_at_once_where_the_hub_cannot_be_reached(tiny_model_dir, tmp_path):
    import shutil

    hub = tmp_path / "hf" / "hub"
    repo = hub / "models--someorg--tiny"
    shutil.copytree(tiny_model_dir, repo / "snapshots" / ("0" * 40), ignore=shutil.ignore_patterns(".built"))
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text("0" * 40)
    env = {k: v for k, v in os.environ.items() if k != "HF_HUB_OFFLINE"}
    env.update(HF_ENDPOINT="http://127.0.0.1:9", HF_HOME=str(tmp_path / "hf"), HF_HUB_CACHE=str(hub), OMP_NUM_THREADS="1")
    p = subprocess.run([sys.executable, "-m", "swarm_node.node.cli", "train", "--model.name", "someorg/tiny", "--run.dir",
                        str(tmp_path / "run"), "--train.steps", "1", "--eval.at_start", "false", "--eval.at_end", "false",
                        "--generation.max_completion_length", "8", "--run.progress", "off", "--run.plot", "false"],
                       cwd=ROOT, env=env, capture_output=True, text=True, timeout=240)
    out = p.stdout + p.stderr
    assert p.returncode == 0, out[-3000:]
    assert "loading someorg/tiny from the cache, offline" in out
    assert "Retrying" not in out and "Traceback" not in out, out[-3000:]
