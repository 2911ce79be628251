"""Tests of node.checkpoint.checkpoint and node.checkpoint.checkpoint_format: exact resume, corruption, retention
and housekeeping. Writes under crashes and SIGKILL: test_checkpoint_atomic.py (it imports the
helpers here)."""

import json
import hashlib
import logging
import os
import random
import re
import stat
from pathlib import Path

import numpy as np
import pytest
import torch
from torch import nn

from swarm_node.node.checkpoint.checkpoint import list_checkpoints, load_checkpoint, load_latest, save_checkpoint
from swarm_node.node.checkpoint.checkpoint_format import CheckpointState, RngState, capture_rng, restore_rng
from swarm_node.node.errors import CheckpointError, NodeError

SIDECAR = re.compile(r"\.(tmp|old|del)-\d+$")


def _small_state(step: int, seed: int = 0) -> tuple[CheckpointState, nn.Module]:
    torch.manual_seed(seed + step)
    model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 4))
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    model(torch.randn(5, 8)).sum().backward()
    opt.step()
    state = CheckpointState(step=step, policy_version=step * 10, model_state=model.state_dict(),
                            optimizer_state=opt.state_dict(), rng=capture_rng(),
                            extra={"config_hash": "abc", "loss_tail": [1.5, 1.25]})
    return state, model


def _sidecars(root: Path) -> list[str]:
    return sorted(p.name for p in root.iterdir() if SIDECAR.search(p.name))


def _rewrite_manifest(path: Path) -> None:
    """Re-sign every file, as a buggy writer would, so only the content checks can catch it."""
    manifest = json.loads((path / "MANIFEST.json").read_text())
    for name, meta in manifest["files"].items():
        data = (path / name).read_bytes()
        meta.update(sha256=hashlib.sha256(data).hexdigest(), size=len(data))
    (path / "MANIFEST.json").write_text(json.dumps(manifest))


# ------------------------------------------------------------------ exact resume

def test_round_trip_tied_qwen2_adamw_resumes_bit_exactly(tmp_path):
    from transformers import Qwen2Config, Qwen2ForCausalLM

    cfg = Qwen2Config(vocab_size=64, hidden_size=16, intermediate_size=32, num_hidden_layers=2,
                      num_attention_heads=2, num_key_value_heads=1, max_position_embeddings=32,
                      tie_word_embeddings=True)

    def make(seed):
        torch.manual_seed(seed)
        return Qwen2ForCausalLM(cfg)

    def train(model, opt, steps):
        for _ in range(steps):  # data comes from the global RNG, so the RNG must resume too
            ids = torch.randint(0, cfg.vocab_size, (2, 8))
            opt.zero_grad()
            model(input_ids=ids, labels=ids).loss.backward()
            opt.step()

    random.seed(1)
    np.random.seed(1)
    model = make(0)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    train(model, opt, 3)
    sd = model.state_dict()
    assert sd["lm_head.weight"].data_ptr() == sd["model.embed_tokens.weight"].data_ptr()
    path = save_checkpoint(tmp_path / "checkpoints", CheckpointState(
        step=3, policy_version=7, model_state=sd, optimizer_state=opt.state_dict(),
        rng=capture_rng(), extra={"config_hash": "deadbeef"}))
    assert path == tmp_path / "checkpoints" / "step_000003"
    # Saving must not consume randomness; these are the draws the resumed process must repeat.
    draws = (torch.rand(4), random.random(), np.random.rand(3))
    train(model, opt, 3)

    torch.manual_seed(999)
    random.seed(999)
    np.random.seed(999)
    model2 = make(1)
    opt2 = torch.optim.AdamW(model2.parameters(), lr=1.0)
    loaded = load_checkpoint(path)
    assert (loaded.step, loaded.policy_version, loaded.extra) == (3, 7, {"config_hash": "deadbeef"})
    assert isinstance(loaded.saved_at, float)
    model2.load_state_dict(loaded.model_state)
    opt2.load_state_dict(loaded.optimizer_state)
    restore_rng(loaded.rng)
    assert opt2.param_groups[0]["lr"] == 1e-2
    assert model2.lm_head.weight is model2.model.embed_tokens.weight
    draws2 = (torch.rand(4), random.random(), np.random.rand(3))
    assert torch.equal(draws[0], draws2[0]) and draws[1] == draws2[1]
    assert np.array_equal(draws[2], draws2[2])
    train(model2, opt2, 3)
    for (name, a), (_, b) in zip(model.state_dict().items(), model2.state_dict().items()):
        assert torch.equal(a, b), name
    for k, st in opt.state_dict()["state"].items():
        for name, value in st.items():
            assert torch.equal(value, opt2.state_dict()["state"][k][name]), (k, name)


def test_rng_restore_repeats_draws_without_saving():
    random.seed(5)
    rng = capture_rng()
    first = (torch.rand(3), random.random(), np.random.rand(2), random.gauss(0, 1))
    restore_rng(rng)
    second = (torch.rand(3), random.random(), np.random.rand(2), random.gauss(0, 1))
    assert torch.equal(first[0], second[0]) and first[1] == second[1] and first[3] == second[3]
    assert np.array_equal(first[2], second[2])


def test_optimizer_structure_round_trips_python_scalars_tuples_and_int_keys(tmp_path):
    opt_state = {
        "state": {0: {"step": 4.0, "momentum_buffer": torch.arange(3.0)},
                  1: {"step": torch.tensor(2.0), "exp_avg": torch.ones(2, 2, dtype=torch.bfloat16)}},
        "param_groups": [{"lr": 0.1, "betas": (0.9, 0.95), "foreach": None, "params": [0, 1]}],
    }
    path = save_checkpoint(tmp_path, CheckpointState(1, 0, {"w": torch.zeros(2)}, opt_state))
    got = load_checkpoint(path).optimizer_state
    assert list(got["state"]) == [0, 1]
    assert got["state"][0]["step"] == 4.0 and isinstance(got["state"][0]["step"], float)
    assert torch.equal(got["state"][0]["momentum_buffer"], torch.arange(3.0))
    assert got["state"][1]["exp_avg"].dtype == torch.bfloat16
    assert torch.equal(got["state"][1]["step"], torch.tensor(2.0))
    assert got["param_groups"] == [{"lr": 0.1, "betas": (0.9, 0.95), "foreach": None, "params": [0, 1]}]
    assert load_checkpoint(path).rng is None


# ------------------------------------------------------------------ corruption

def _truncate(path):
    f = path / "model.safetensors"
    f.write_bytes(f.read_bytes()[: f.stat().st_size // 2])
    return r"model\.safetensors.*truncated"


def _flip(path):
    f = path / "model.safetensors"
    data = bytearray(f.read_bytes())
    data[len(data) // 2] ^= 0xFF
    f.write_bytes(bytes(data))
    return r"model\.safetensors.*hash mismatch"


def _no_manifest(path):
    (path / "MANIFEST.json").unlink()
    return r"MANIFEST\.json missing.*incomplete"


def _garbage_state(path):
    (path / "state.json").write_text("{not json")
    _rewrite_manifest(path)
    return r"state\.json.*unparseable json"


def _fields_missing(path):
    (path / "state.json").write_text(json.dumps({"format_version": 1}))
    _rewrite_manifest(path)
    return r"state\.json.*malformed"


def _file_missing(path):
    (path / "optimizer.safetensors").unlink()
    return r"optimizer\.safetensors.*missing"


@pytest.mark.parametrize("corrupt", [_truncate, _flip, _no_manifest, _garbage_state,
                                     _fields_missing, _file_missing])
def test_corruption_is_reported_and_load_latest_falls_back(tmp_path, caplog, corrupt):
    save_checkpoint(tmp_path, _small_state(1)[0])
    bad = save_checkpoint(tmp_path, _small_state(2)[0])
    pattern = corrupt(bad)
    with pytest.raises(CheckpointError, match=pattern):
        load_checkpoint(bad)
    caplog.set_level(logging.WARNING, logger="swarm_node.node.run.checkpoint")
    state, path = load_latest(tmp_path)
    assert path == tmp_path / "step_000001" and state.step == 1
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1 and "step_000002" in warnings[0].getMessage()
    assert re.search(pattern, warnings[0].getMessage())
    fresh = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 4))
    fresh.load_state_dict(state.model_state)
    torch.optim.AdamW(fresh.parameters()).load_state_dict(state.optimizer_state)


def test_all_corrupt_raises_listing_each(tmp_path, caplog):
    for path in [save_checkpoint(tmp_path, _small_state(step)[0]) for step in (1, 2)]:
        _flip(path)
    with pytest.raises(CheckpointError) as info:
        load_latest(tmp_path)
    assert isinstance(info.value, NodeError)
    assert "step_000001" in str(info.value) and "step_000002" in str(info.value)
    assert str(info.value).count("hash mismatch") == 2


# ------------------------------------------------------------------ housekeeping

def test_keep_last_prunes_oldest(tmp_path):
    for step in range(1, 6):
        save_checkpoint(tmp_path, _small_state(step)[0], keep_last=2)
    assert [p.name for p in list_checkpoints(tmp_path)] == ["step_000004", "step_000005"]
    assert _sidecars(tmp_path) == []
    # An older step re-saved after a resume is never pruned by its own save.
    save_checkpoint(tmp_path, _small_state(3)[0], keep_last=1)
    assert [p.name for p in list_checkpoints(tmp_path)] == ["step_000003", "step_000005"]
    with pytest.raises(ValueError):
        save_checkpoint(tmp_path, _small_state(6)[0], keep_last=0)


def test_retention_never_lets_a_corrupt_checkpoint_displace_a_good_one(tmp_path, caplog):
    # The newest checkpoint is corrupt: resume falls back to step 10, the node trains on and
    # saves step 15. keep_last=2 must keep 10 and 15 (the good ones), not 15 and the corrupt 20.
    save_checkpoint(tmp_path, _small_state(10)[0], keep_last=2)
    _flip(save_checkpoint(tmp_path, _small_state(20)[0], keep_last=2))
    state, path = load_latest(tmp_path)
    assert state.step == 10
    caplog.set_level(logging.WARNING, logger="swarm_node.node.run.checkpoint")
    save_checkpoint(tmp_path, _small_state(15)[0], keep_last=2)
    assert [p.name for p in _step_dirs_named(tmp_path)] == ["step_000010", "step_000015"]
    assert any("step_000020" in r.getMessage() and "hash mismatch" in r.getMessage() for r in caplog.records)
    # With keep_last=1 the newest valid one (the one just written) is what stays.
    save_checkpoint(tmp_path, _small_state(16)[0], keep_last=1)
    assert [p.name for p in _step_dirs_named(tmp_path)] == ["step_000016"]
    assert load_latest(tmp_path)[0].step == 16


def test_retention_notices_a_checkpoint_corrupted_after_it_was_verified(tmp_path):
    save_checkpoint(tmp_path, _small_state(1)[0], keep_last=3)
    save_checkpoint(tmp_path, _small_state(2)[0], keep_last=3)  # verifies (and remembers) step 1
    _truncate(tmp_path / "step_000001")
    save_checkpoint(tmp_path, _small_state(3)[0], keep_last=3)
    assert [p.name for p in _step_dirs_named(tmp_path)] == ["step_000002", "step_000003"]


def _step_dirs_named(root):
    return sorted(p for p in root.iterdir() if re.fullmatch(r"step_\d+", p.name))


def test_resaving_same_step_replaces_it(tmp_path):
    save_checkpoint(tmp_path, _small_state(1, seed=0)[0])
    second, model = _small_state(1, seed=5)
    path = save_checkpoint(tmp_path, second)
    assert list_checkpoints(tmp_path) == [path] and _sidecars(tmp_path) == []
    loaded = load_checkpoint(path)
    for name, tensor in model.state_dict().items():
        assert torch.equal(loaded.model_state[name], tensor)
    assert (tmp_path / "latest").read_text().strip() == "step_000001"


def test_empty_or_missing_root(tmp_path):
    assert load_latest(tmp_path) is None
    assert load_latest(tmp_path / "nope") is None
    assert list_checkpoints(tmp_path / "nope") == []
    with pytest.raises(CheckpointError, match="not found"):
        load_checkpoint(tmp_path / "step_000001")


def test_cuda_rng_states_round_trip_and_warn_when_not_restorable(tmp_path, caplog):
    fake_cuda = (torch.arange(16, dtype=torch.uint8), torch.ones(16, dtype=torch.uint8))
    rng = RngState(torch.get_rng_state(), random.getstate(), np.random.get_state(), fake_cuda)
    path = save_checkpoint(tmp_path, CheckpointState(1, 0, {"w": torch.zeros(1)}, rng=rng))
    loaded = load_checkpoint(path).rng
    assert len(loaded.torch_cuda) == 2
    assert all(torch.equal(a, b) for a, b in zip(loaded.torch_cuda, fake_cuda))
    if torch.cuda.device_count() != 2:
        caplog.set_level(logging.WARNING, logger="swarm_node.node.run.checkpoint")
        restore_rng(loaded)
        assert "CUDA RNG" in caplog.text


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a GPU")
def test_cuda_tied_tensors_and_rng_on_gpu(tmp_path):
    emb = torch.randn(8, 4, device="cuda")
    rng = capture_rng()
    expected = torch.rand(5, device="cuda")
    path = save_checkpoint(tmp_path, CheckpointState(1, 0, {"a": emb, "b": emb}, rng=rng))
    loaded = load_checkpoint(path)
    torch.rand(7, device="cuda")
    restore_rng(loaded.rng)
    assert torch.equal(torch.rand(5, device="cuda"), expected)
    assert torch.equal(loaded.model_state["a"], emb.cpu()) and torch.equal(loaded.model_state["b"], emb.cpu())


@pytest.mark.parametrize("umask", [0o022, 0o027], ids=oct)
def test_a_checkpoints_files_have_the_mode_of_the_rest_of_the_run_folder(tmp_path, umask):
    # safetensors writes 0600 (node/checkpoint/file_mode.py); the checkpoint's files are all 0666 - umask
    old = os.umask(umask)
    try:
        path = save_checkpoint(tmp_path, _small_state(1)[0])
    finally:
        os.umask(old)
    modes = {p.name: stat.S_IMODE(p.stat().st_mode) for p in path.iterdir()}
    assert "model.safetensors" in modes and set(modes.values()) == {0o666 & ~umask}, modes
