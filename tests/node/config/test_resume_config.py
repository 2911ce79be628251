"""``--resume`` continues the run it names with that run's own settings (node/config/resume_config.py):
a run started from a config file, resumed with only --run.dir and --resume, keeps its tasks, batch
and learning rate, takes the flags given on top, and says what they changed."""

from __future__ import annotations

import json

import pytest

from swarm_node.node.cli import main
from swarm_node.node.errors import ConfigError
from swarm_node.node.config.config import load_config
from swarm_node.node.config.resume_config import differences, load_run_config

pytestmark = pytest.mark.usefixtures("one_torch_thread")


def test_differences_name_each_changed_setting():
    a = load_config(None, {"train.steps": 10})
    b = load_config(None, {"train.steps": 600, "run.resume": True, "tasks.families": ["counting"]})
    assert differences(a, b) == ['tasks.families: ["arithmetic", "lists", "base", "boolean", "counting"] -> ["counting"]',
                                 "train.steps: 10 -> 600"]


def test_a_resume_keeps_the_runs_own_settings_and_says_what_the_flags_change(tiny_model_dir, tmp_path, capsys):
    toml = tmp_path / "mine.toml"
    toml.write_text(f"""
[model]
name = "{tiny_model_dir}"
[tasks]
families = ["counting"]
[generation]
prompts_per_step = 2
num_generations = 2
max_completion_length = 4
[learner]
learning_rate = 3e-3
[train]
steps = 2
[run]
progress = "off"
plot = false
checkpoint_every = 1
[eval]
at_start = false
at_end = false
""")
    run = tmp_path / "long"
    assert main(["train", "--config", str(toml), "--run.dir", str(run)]) == 0
    # The README's resume: the run folder and --resume, and a longer run asked for.
    capsys.readouterr()
    assert main(["train", "--run.dir", str(run), "--resume", "--train.steps", "3"]) == 0
    err = capsys.readouterr().err
    saved = json.loads((run / "config.json").read_text())
    assert saved["tasks"]["families"] == ["counting"] and saved["generation"]["prompts_per_step"] == 2
    assert saved["learner"]["learning_rate"] == 3e-3 and saved["model"]["name"] == str(tiny_model_dir)
    recs = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in recs] == [1, 2, 3] and recs[-1]["batch_size"] <= 2 * 2
    said = [line.split(": ", 1)[1] for line in err.splitlines() if "resuming" in line and "saved config" in line]
    assert said == [f"resuming {run} with its saved config; this start changes train.steps: 2 -> 3"], err[-3000:]


def test_a_resume_of_a_folder_that_holds_no_run_says_so_plainly(tiny_model_dir, tmp_path, capsys):
    typo = tmp_path / "runs" / "dmeo"
    assert main(["train", "--model.name", str(tiny_model_dir), "--run.dir", str(typo), "--resume",
                 "--print-config"]) == 0
    err = capsys.readouterr().err
    assert f"--resume (run.resume): {typo} holds no run to resume (the folder does not exist): starting a new " \
           "run there; check --run.dir" in err, err[-2000:]
    typo.mkdir(parents=True)
    assert main(["train", "--model.name", str(tiny_model_dir), "--run.dir", str(typo), "--resume",
                 "--print-config"]) == 0
    assert "holds no run to resume (no config.json)" in capsys.readouterr().err


def test_the_folder_resumed_is_the_one_read_and_a_damaged_saved_config_is_refused(tmp_path):
    moved = tmp_path / "moved"
    moved.mkdir()
    (moved / "config.json").write_text(json.dumps({"run": {"dir": "/somewhere/else"}, "train": {"steps": 7}}))
    cfg, changed = load_run_config(None, {"run.dir": str(moved), "run.resume": True})
    assert cfg.run.dir == str(moved) and cfg.train.steps == 7
    assert changed == [f'run.dir: "/somewhere/else" -> "{moved}"']
    (moved / "config.json").write_text("{not json")
    with pytest.raises(ConfigError, match="cannot resume from .*config.json"):
        load_run_config(None, {"run.dir": str(moved), "run.resume": True})
    # A fresh start ignores a saved config: it is not a resume.
    assert load_run_config(None, {"run.dir": str(moved)})[0].train.steps == 600
