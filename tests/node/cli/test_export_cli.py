"""``swarm-node export``: a tiny run's checkpoint written as a Hugging Face folder that transformers
(and peft, for ``--adapter``) load without project code, giving the same logits as the policy at
that checkpoint; the model card; and the refusals (a damaged checkpoint, an occupied --out, an
adapter of a full run), each with nothing written."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from swarm_node.node.cli import main
from swarm_node.node.config.config import load_config
from swarm_node.node.evaluate.eval_checkpoint import find_checkpoint, policy_at, run_config
from swarm_node.node.evaluate.export import model_card
from tests.helpers.swarm_helpers import train_to_end

pytestmark = pytest.mark.usefixtures("one_torch_thread")


def _run(model_dir: Path, run: Path, **over) -> Path:
    cfg = load_config(None, {"model.name": str(model_dir), "run.dir": str(run), "run.progress": "off",
                             "run.plot": False, "generation.prompts_per_step": 2, "generation.num_generations": 2,
                             "generation.max_completion_length": 6, "train.steps": 4, "run.checkpoint_every": 2,
                             "eval.every": 2, "eval.tasks_per_family": 2, "eval.samples": 1,
                             "tasks.families": ["arithmetic", "boolean"], **over})
    train_to_end(cfg)
    return run


@pytest.fixture(scope="module")
def full_run(warm_tiny_model_dir, tmp_path_factory):
    return _run(warm_tiny_model_dir, tmp_path_factory.mktemp("export") / "run")


@pytest.fixture(scope="module")
def warmer_model_dir(tmp_path_factory) -> Path:
    """The tiny model warm-started long enough (150 steps, ~6 s) that most completions are
    well-formed, so a LoRA run's rewards vary and its adapter moves off its zero start (the shared
    warm_tiny_model_dir almost never closes an answer block: its groups carry no gradient)."""
    from dataclasses import replace

    from swarm_node.policies.default_model import build_default_model
    from tests.conftest import TINY_RECIPE

    out = tmp_path_factory.mktemp("warmer") / "model"
    build_default_model(out, replace(TINY_RECIPE, hidden_size=64, intermediate_size=128, sft_steps=150, sft_lr=3e-3))
    return out


@pytest.fixture(scope="module")
def lora_run(warmer_model_dir, tmp_path_factory):
    pytest.importorskip("peft")
    # lr high enough that the adapter moves away from zero in 4 steps (merged != base)
    return _run(warmer_model_dir, tmp_path_factory.mktemp("export-lora") / "run",
                **{"model.lora_rank": 4, "learner.learning_rate": 5e-2, "generation.num_generations": 4,
                   "generation.max_completion_length": 12, "generation.prompts_per_step": 4})


IDS = torch.tensor([[5, 9, 17, 3, 11, 2]])


def _logits(model) -> torch.Tensor:
    model.eval()
    with torch.no_grad():
        return model(input_ids=IDS).logits


def test_export_writes_a_folder_transformers_loads_with_the_checkpoints_weights(full_run, tmp_path, capsys):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    out = tmp_path / "model"
    umask = os.umask(0o022)
    try:
        assert main(["export", str(full_run), "--out", str(out)]) == 0
    finally:
        os.umask(umask)
    said = capsys.readouterr().out
    assert {stat.S_IMODE(p.stat().st_mode) for p in out.iterdir()} == {0o644}  # the weights too: not 0600
    assert f"exported the model of {full_run} at step 4 (policy v4, step_000004) to {out}" in said
    files = {p.name for p in out.iterdir()}
    assert {"config.json", "model.safetensors", "README.md", "swarm_node_export.json"} <= files
    assert not any(f.endswith(".py") for f in files) and "auto_map" not in json.loads((out / "config.json").read_text())
    policy, _ = policy_at(run_config(full_run), find_checkpoint(full_run))
    loaded = AutoModelForCausalLM.from_pretrained(out)
    assert torch.equal(_logits(loaded), _logits(policy.model))
    tok = AutoTokenizer.from_pretrained(out)
    assert tok("Q: 1+1=\nA: ")["input_ids"] == policy.tokenizer("Q: 1+1=\nA: ")["input_ids"]
    assert not list(tmp_path.glob(".model.partial-*"))  # the temporary folder became --out
    prov = json.loads((out / "swarm_node_export.json").read_text())
    assert prov["step"] == 4 and prov["checkpoint"].endswith("step_000004") and prov["config"]["train"]["steps"] == 4


@pytest.mark.subprocess
def test_a_new_python_loads_the_export_and_generates_without_the_projects_code(full_run, tmp_path):
    out = tmp_path / "model"
    assert main(["export", str(full_run), "--out", str(out), "--step", "2"]) == 0
    code = ("import sys; from transformers import AutoModelForCausalLM, AutoTokenizer\n"
            f"m = AutoModelForCausalLM.from_pretrained({str(out)!r})\n"
            f"t = AutoTokenizer.from_pretrained({str(out)!r})\n"
            "ids = t('Q: 1+1=\\nA: ', return_tensors='pt').input_ids\n"
            "new = m.generate(ids, max_new_tokens=5, do_sample=False)[0, ids.shape[1]:]\n"
            "assert len(new) >= 1 and isinstance(t.decode(new), str)\n"
            "assert not any(k.startswith(('swarm_node', 'node', 'policies', 'rewards', 'protocol')) for k in sys.modules)\n"
            "print(type(m).__name__)")
    done = subprocess.run([sys.executable, "-I", "-c", code], cwd=tmp_path, capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip() == "Qwen2ForCausalLM"


def test_the_model_card_says_how_it_was_trained_and_its_held_out_scores(full_run, tmp_path):
    out = tmp_path / "model"
    assert main(["export", str(full_run / "checkpoints" / "step_000002"), "--out", str(out)]) == 0
    card = (out / "README.md").read_text()
    assert "# A policy trained by swarm-node: step 2" in card and "checkpoint `step_000002`" in card
    assert "arithmetic, boolean at level" in card and "2 steps of off-policy-corrected GRPO" in card
    assert "trained alone (no swarm)" in card or "in a swarm over" in card
    # the held-out table: one row per evaluation up to the exported step (the start's and step 2's;
    # step 4's came later)
    rows = [line for line in card.splitlines() if line.startswith("| ") and line[2].isdigit()]
    assert [r.split(" | ")[0] for r in rows] == ["| 0", "| 2"] and "| arithmetic | boolean |" in card
    assert "AutoModelForCausalLM.from_pretrained(DIR)" in card


def test_a_lora_run_exports_merged_or_as_its_adapter(lora_run, warmer_model_dir, tmp_path):
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    policy, _ = policy_at(run_config(lora_run), find_checkpoint(lora_run))
    want = _logits(policy.model)
    base = _logits(AutoModelForCausalLM.from_pretrained(warmer_model_dir))
    assert not torch.allclose(want, base, atol=1e-4)  # the adapter changed something

    merged = tmp_path / "merged"
    assert main(["export", str(lora_run), "--out", str(merged)]) == 0
    assert not (merged / "adapter_config.json").exists()
    assert torch.allclose(_logits(AutoModelForCausalLM.from_pretrained(merged)), want, atol=1e-5)
    assert "with the LoRA adapter merged in" in (merged / "README.md").read_text()

    adapter = tmp_path / "adapter"
    assert main(["export", str(lora_run), "--out", str(adapter), "--adapter"]) == 0
    assert (adapter / "adapter_config.json").is_file() and not (adapter / "model.safetensors").exists()
    again = PeftModel.from_pretrained(AutoModelForCausalLM.from_pretrained(warmer_model_dir), adapter)
    assert torch.allclose(_logits(again), want, atol=1e-5)
    card = (adapter / "README.md").read_text()
    assert "library_name: peft" in card and f"`BASE` is the folder `{warmer_model_dir}`." in card


def _adapter_card(name: str, loaded_from: str | None, chat: bool = True, **over) -> str:
    cfg = load_config(None, {"model.name": name, "model.lora_rank": 4, **over})
    return model_card(cfg, Path("/runs/r"), Path("/runs/r/checkpoints/step_000002"), 2, 2, True, [], chat=chat,
                      loaded_from=loaded_from)


def test_an_adapters_card_names_a_base_transformers_loads(tmp_path, monkeypatch, capsys):
    """A registry name or a .gguf file is no name transformers loads: the card says which folder is
    (the one ``build-model`` prints, what the run loaded), and for a registry model its hub twin."""
    from swarm_node.policies.gguf_convert import gguf_folder_name
    from swarm_node.policies.model_cache import BUILD_OK, models_root
    from swarm_node.policies.registry_models import REGISTRY_MODELS

    monkeypatch.setenv("SWARM_NODE_HOME", str(tmp_path / "home"))
    gguf = tmp_path / "mine.gguf"
    gguf.write_bytes(b"GGUF stand-in")

    def printed(name: str, folder: str) -> str:  # as if built: build-model finds it and prints it
        (models_root() / folder).mkdir(parents=True)
        (models_root() / folder / BUILD_OK).write_text("{}")
        assert main(["build-model", name]) == 0
        return capsys.readouterr().out.strip()

    reg = REGISTRY_MODELS["smollm2-135m-instruct"]
    where = printed(reg.name, reg.folder_name())
    card = _adapter_card(reg.name, where)
    assert (f"`BASE` is the folder `swarm-node build-model {reg.name}` prints (where this was exported: "
            f"`{where}`)") in card
    assert f"the same model as `{reg.hub_id}` de-quantized" in card and "close to them, not equal" in card
    assert "# BASE: below" in card and "# the model named above" not in card

    where = printed(str(gguf), gguf_folder_name(gguf))
    card = _adapter_card(str(gguf), where)
    assert where.startswith(str(models_root())) and f"`{where}`" in card
    assert f"`BASE` is the folder `{gguf}` was converted to" in card

    folder = tmp_path / "my-model"
    folder.mkdir()
    (folder / "config.json").write_text("{}")
    assert f"`BASE` is the folder `{folder}`." in _adapter_card(str(folder), str(folder))
    assert "`BASE` is the hub id `org/some-model`." in _adapter_card("org/some-model", "org/some-model")
    default = _adapter_card("default", str(tmp_path / "built"), chat=False)
    assert "# the model named above" in default and "`BASE` is" not in default  # as before: no folder named


@pytest.mark.parametrize(("answer", "chat", "lenient"), [("auto", True, True), ("auto", False, False),
                                                        ("lenient", False, True), ("tags", True, False)])
def test_the_card_says_where_the_reward_read_the_answer(answer, chat, lenient):
    card = _adapter_card("org/some-model", None, chat=chat, **{"tasks.answer": answer})
    assert ("read leniently (`tasks.answer` lenient)" in card) == lenient
    assert ("`\\boxed{}`" in card) == lenient
    assert ("the model answers `<answer>...</answer>`." in card) == (not lenient)


def test_export_refuses_with_the_reason_and_writes_nothing(full_run, tmp_path, capsys):
    def fails(code: int, *argv) -> str:
        assert main(["export", *map(str, argv)]) == code
        return capsys.readouterr().err

    busy = tmp_path / "busy"
    busy.mkdir()
    (busy / "keep.txt").write_text("mine")
    assert "already exists and is not an empty folder" in fails(2, full_run, "--out", busy)
    assert (busy / "keep.txt").read_text() == "mine"
    assert "there is no adapter to write" in fails(2, full_run, "--out", tmp_path / "a", "--adapter")
    assert "is not a run folder" in fails(2, tmp_path, "--out", tmp_path / "b")
    assert "has no checkpoint of step 3: it has steps 2, 4" in fails(2, full_run, "--out", tmp_path / "c", "--step", "3")
    ckpt = full_run / "checkpoints" / "step_000002"
    assert "names another checkpoint" in fails(2, ckpt, "--out", tmp_path / "d", "--step", "4")

    # A damaged checkpoint (one byte of its weights flipped): refused by its manifest, nothing written.
    import shutil

    copy = tmp_path / "run"
    shutil.copytree(full_run, copy)
    weights = copy / "checkpoints" / "step_000004" / "model.safetensors"
    data = bytearray(weights.read_bytes())
    data[-1] ^= 0xFF
    weights.write_bytes(bytes(data))
    err = fails(1, copy / "checkpoints" / "step_000004", "--out", tmp_path / "e")
    assert "model.safetensors" in err and ("sha256" in err or "hash" in err), err
    assert not (tmp_path / "e").exists() and not list(tmp_path.glob(".e.partial-*"))
    # A run folder's newest *valid* checkpoint is taken past the damaged one, as a resume would.
    assert main(["export", str(copy), "--out", str(tmp_path / "f")]) == 0
    assert json.loads((tmp_path / "f" / "swarm_node_export.json").read_text())["step"] == 2


def test_export_help_explains(capsys):
    with pytest.raises(SystemExit):
        main(["export", "--help"])
    out = capsys.readouterr().out
    assert "AutoModelForCausalLM.from_pretrained" in out and "--adapter" in out and "never overwrites" in out
