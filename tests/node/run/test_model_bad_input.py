"""A model that cannot serve as a policy is refused at start with one clear message and exit 2,
before any step: no EOS token, a GGUF file transformers cannot read; and a model without a chat
template is prompted raw, saying so."""

from __future__ import annotations

import json
import logging
import shutil

import pytest

from swarm_node.node.errors import ConfigError
from swarm_node.node.config.config import load_config
from swarm_node.node.config.policy_loader import load_policy

pytestmark = pytest.mark.usefixtures("one_torch_thread")


def test_a_tokenizer_without_eos_is_refused_as_the_users_input(tiny_model_dir, tmp_path):
    model = tmp_path / "no-eos"
    shutil.copytree(tiny_model_dir, model)
    for name in ("tokenizer_config.json", "special_tokens_map.json"):
        f = model / name
        if f.exists():
            data = json.loads(f.read_text())
            data.pop("eos_token", None)
            f.write_text(json.dumps(data))
    with pytest.raises(ConfigError, match="has no EOS token of the model's"):
        load_policy(load_config(None, {"model.name": str(model)}))


def test_a_gguf_transformers_cannot_read_is_refused_with_what_to_do(tmp_path, monkeypatch):
    home = tmp_path / "home"  # its own: other tests convert good GGUF files into the shared one
    monkeypatch.setenv("SWARM_NODE_HOME", str(home))
    bad = tmp_path / "weights.gguf"
    bad.write_bytes(b"GGUF" + b"\x00" * 64)  # a GGUF header and nothing a reader can use
    with pytest.raises(ConfigError, match="cannot read .*weights.gguf as a model"):
        load_policy(load_config(None, {"model.name": str(bad)}))
    models = home / "models"
    left = [p.name for p in models.iterdir()] if models.exists() else []
    assert not [n for n in left if not n.endswith(".lock")], left  # nothing half-built kept, not even its build folder


def test_a_pretrained_model_without_a_chat_template_is_prompted_raw_and_says_so(tiny_model_dir, tmp_path, caplog,
                                                                                  monkeypatch):
    import swarm_node.node.config.model_defaults as defaults

    monkeypatch.setattr(defaults, "REAL_MODEL_BYTES", 1)  # the tiny model stands in for a pretrained one
    caplog.set_level(logging.WARNING)
    policy = load_policy(load_config(None, {"model.name": str(tiny_model_dir), "model.lora_rank": 0,
                                            "model.dtype": "float32"}))
    assert policy.prompt_format.kind == "raw"
    assert "has no chat template: prompts are swarm-node's raw template" in caplog.text
