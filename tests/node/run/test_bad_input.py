"""Every mistake a newcomer makes at start-up gets a clear message: exit 2, one paragraph that
names the problem and the fix, no traceback, nothing created or lost. Each case runs the real CLI
in a subprocess, as a user would."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.helpers.paths import ROOT

pytestmark = pytest.mark.subprocess


def swarm_node(*args: str, cwd: Path, env: dict | None = None, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "swarm_node.node.cli", *args], cwd=cwd, capture_output=True, text=True,
                          timeout=timeout, env=env or dict(os.environ, PYTHONPATH=str(ROOT)))


def tree(root: Path) -> set[str]:
    return {str(p.relative_to(root)) for p in root.rglob("*")}


def assert_clear_error(r: subprocess.CompletedProcess, *needles: str) -> str:
    err = r.stderr
    assert r.returncode == 2, (r.returncode, err[-2000:])
    assert "Traceback" not in err, err[-3000:]
    message = err[err.index("swarm-node: "):]  # after the start-up log lines
    assert len(message) < 700, message  # one paragraph, not a dump
    for n in needles:
        assert n in message, (n, message)
    return message


@pytest.fixture
def workdir(tmp_path) -> Path:
    (tmp_path / "afile").write_text("not a folder")
    return tmp_path


def train(model: Path, *args: str) -> list[str]:
    return ["train", "--model.name", str(model), "--train.steps", "1", "--run.progress", "off", "--run.plot", "false",
            *args]


@pytest.mark.parametrize("run_dir, needles", [
    ("afile", ("afile is a file, not a folder", "choose another --run.dir")),
    ("afile/sub", ("afile is a file", "cannot be created", "choose another --run.dir")),
])
def test_a_run_dir_that_cannot_be_a_folder(tiny_model_dir, workdir, run_dir, needles):
    before = tree(workdir)
    r = swarm_node(*train(tiny_model_dir, "--run.dir", run_dir), cwd=workdir)
    assert_clear_error(r, *needles)
    assert tree(workdir) == before and (workdir / "afile").read_text() == "not a folder"


def _read_only_dir(tmp_path: Path) -> Path:
    if os.geteuid() != 0:
        d = tmp_path / "ro"
        d.mkdir()
        d.chmod(0o555)
        return d
    # root writes through any mode bits; sysfs refuses new files even to root.
    if not os.path.isdir("/sys/kernel"):
        pytest.skip("needs a read-only folder: running as root without /sys")
    return Path("/sys/kernel")


@pytest.mark.parametrize("below", [False, True])
def test_a_run_dir_this_user_cannot_write(tiny_model_dir, workdir, below):
    ro = _read_only_dir(workdir)
    target = ro / "run" if below else ro
    before = set(os.listdir(ro))
    r = swarm_node(*train(tiny_model_dir, "--run.dir", str(target)), cwd=workdir)
    m = assert_clear_error(r, "cannot", str(ro), "choose another --run.dir")
    assert "Permission denied" in m or "Read-only file system" in m, m
    assert set(os.listdir(ro)) == before


def test_a_config_that_is_a_folder_or_not_utf8(tiny_model_dir, workdir):
    (workdir / "configs").mkdir()
    assert_clear_error(swarm_node(*train(tiny_model_dir, "--config", "configs"), cwd=workdir),
                       "configs is a folder", "pass the TOML file itself")
    (workdir / "latin1.toml").write_bytes("[model]\nname = \"caf\xe9\"\n".encode("latin-1"))
    assert_clear_error(swarm_node(*train(tiny_model_dir, "--config", "latin1.toml"), cwd=workdir),
                       "latin1.toml is not UTF-8 text", "byte 0xe9")
    assert tree(workdir) == {"afile", "configs", "latin1.toml"}


@pytest.mark.parametrize("device, needles", [
    ("cuda:0", ("--model.device cuda:0", "--model.device cpu")),
    ("foo", ("'foo' is not a torch device", "cuda:N")),
    ("cuda:7", ("--model.device cuda:7", "--model.device cpu")),
])
def test_a_device_this_machine_does_not_have(tiny_model_dir, workdir, device, needles):
    import torch

    if device.startswith("cuda") and torch.cuda.device_count() > int(device.split(":")[1]):
        pytest.skip(f"this machine has {device}")
    r = swarm_node(*train(tiny_model_dir, "--run.dir", "r"), "--model.device", device, cwd=workdir)
    assert_clear_error(r, *needles)
    assert not (workdir / "r").exists()


def test_a_completion_length_past_the_models_positions(tiny_model_dir, workdir):
    # The tiny model has 128 positions (the embedded default 1024).
    r = swarm_node(*train(tiny_model_dir, "--run.dir", "r", "--generation.max_completion_length", "200"), cwd=workdir)
    message = assert_clear_error(r, "max_completion_length 200 does not fit", "128 positions",
                                 "--generation.max_completion_length")
    room = int(message.split("use --generation.max_completion_length ")[1].split()[0])
    assert 64 < room < 128
    assert not (workdir / "r").exists()  # the folder this failed start made is gone again


def test_config_rules_read_as_sentences(tiny_model_dir, workdir):
    m = assert_clear_error(swarm_node(*train(tiny_model_dir, "--tasks.families", "[]"), cwd=workdir),
                           "tasks.families: no task family chosen", "arithmetic")
    assert "unknown task families" not in m
    m = assert_clear_error(swarm_node(*train(tiny_model_dir, "--swarm.transport", "memory",
                                             "--swarm.external_groups", "8"), cwd=workdir),
                           "swarm.external_groups (8) must be below generation.prompts_per_step (8)")
    assert "  : " not in m and "Value error" not in m and "{" not in m  # no empty key, no dumped input


def test_resuming_with_another_lora_rank_says_what_differs(tiny_model_dir, workdir):
    r = swarm_node(*train(tiny_model_dir, "--run.dir", "r"), cwd=workdir)
    assert r.returncode == 0, r.stderr[-2000:]
    before = tree(workdir / "r")
    r = swarm_node(*train(tiny_model_dir, "--run.dir", "r", "--resume", "--model.lora_rank", "8",
                          "--train.steps", "2"), cwd=workdir)
    assert_clear_error(r, "--model.lora_rank 0", "--model.lora_rank 8", "another --run.dir")
    assert tree(workdir / "r") == before


def test_a_checkpoint_that_does_not_fit_the_model_is_summarised(tiny_model_dir, tmp_path):
    # When the saved config cannot tell (say, it was edited), the tensor check still answers in a
    # few lines instead of torch's list of every key.
    import torch

    from swarm_node.node.checkpoint.checkpoint_format import CheckpointState
    from swarm_node.node.errors import CheckpointError
    from swarm_node.node.checkpoint.resume import mismatch as _mismatch

    model = {f"layer{i}.weight": torch.zeros(2, 2) for i in range(40)}
    saved = CheckpointState(step=1, policy_version=1,
                            model_state={f"base.layer{i}.weight": torch.zeros(2, 2) for i in range(40)}
                            | {"layer0.weight": torch.zeros(3, 2)},
                            extra={"config": {"model": {"name": "m", "lora_rank": 0}}})
    text = _mismatch(model, saved)
    assert "39 of the model's tensors are not in it" in text and "40 of its tensors are not in the model" in text
    assert "1 tensors differ in shape (e.g. layer0.weight)" in text and "lora_rank 0" in text
    assert len(text) < 600


def test_plot_says_what_a_folder_is_missing(tmp_path, workdir):
    m = assert_clear_error(swarm_node("plot", "nowhere", cwd=workdir), "no such folder: nowhere")
    (workdir / "empty").mkdir()
    assert_clear_error(swarm_node("plot", "empty", cwd=workdir), "no metrics.jsonl", "runs/demo/node0")
    sim = workdir / "sim"
    for i in range(2):
        (sim / f"node{i}").mkdir(parents=True)
        (sim / f"node{i}" / "metrics.jsonl").write_text(
            "".join(json.dumps({"step": s, "correct": 0.1 * s, "reward": 0.2, "rho": 1.0, "lr_factor": 1.0}) + "\n"
                    for s in range(1, 5)))
    (sim / "sim.json").write_text(json.dumps({"nodes": 2}))
    r = swarm_node("plot", "sim", cwd=workdir)
    assert r.returncode == 0, r.stderr
    assert {"sim/reward.png", "sim/ess.png", "sim/node0/reward_curve.png", "sim/node1/reward_curve.png"} \
        <= set(r.stdout.split())


def test_ctrl_c_while_the_model_builds_exits_at_once_without_a_traceback(tmp_path):
    # An empty model cache: the node builds the embedded default (about 25 s); Ctrl-C during it.
    env = dict(os.environ, PYTHONPATH=str(ROOT), SWARM_NODE_HOME=str(tmp_path / "home"), OMP_NUM_THREADS="1")
    # Started as a shell starts a background job, with SIGINT ignored: the node must stop on it
    # anyway (and this test then does not depend on how the suite itself was started).
    p = subprocess.Popen([sys.executable, "-m", "swarm_node.node.cli", "train", "--run.dir", "r", "--run.progress", "off"],
                         cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                         preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_IGN))
    status = tmp_path / "r" / "status.json"
    deadline = time.time() + 120
    while True:
        assert p.poll() is None, p.communicate()
        assert time.time() < deadline, "the node never said it was building the default model"
        try:
            if json.loads(status.read_text())["phase"] == "building the embedded default model":
                break
        except (OSError, ValueError, KeyError):
            pass
        time.sleep(0.1)
    p.send_signal(signal.SIGINT)
    out, err = p.communicate(timeout=60)
    assert p.returncode == 130, err[-2000:]
    assert "Traceback" not in err and "FATAL" not in err and "swarm-node: interrupted (Ctrl-C)" in err
    # It left without waiting for the build: the cache holds no finished model.
    assert not list((tmp_path / "home").rglob("BUILD_OK"))
    assert not (tmp_path / "r").exists()  # the folder this start made is gone again


def test_a_sim_folder_that_cannot_be_a_folder(tiny_model_dir, workdir):
    before = tree(workdir)
    r = swarm_node("sim", "--nodes", "2", "--transport", "memory", "--model.name", str(tiny_model_dir),
                   "--run.dir", "afile/sub", cwd=workdir)
    assert_clear_error(r, "afile is a file", "choose another --run.dir")
    r = swarm_node("sim", "--nodes", "2", "--transport", "memory", "--model.name", str(tiny_model_dir),
                   "--run.dir", "s", "--model.device", "foo", cwd=workdir)
    assert_clear_error(r, "'foo' is not a torch device")
    assert tree(workdir) == before


def test_help_lists_allowed_values_and_none(capsys):
    from swarm_node.node.cli import main

    with pytest.raises(SystemExit):
        main(["train", "--help"])
    out = " ".join(capsys.readouterr().out.split())  # argparse wraps lines
    assert "one of: mean, median, opob, opob_approx" in out and "one of: text, json" in out
    assert "(default: none)" in out and "(default: null)" not in out
    assert "configs/solo.toml" not in out and "12D3Koo" not in out
