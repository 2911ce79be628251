"""reasoning-gym as a task source (rewards/rg_source.py): ids that name (dataset, config, version,
seed), regenerated the same in another process and pinned by a golden file to the version in the
project's extra; scoring by the dataset's own score_answer, partial credit included; and the
refusals (an unknown dataset, a config it refuses, seed or size in the config)."""

from __future__ import annotations

import hashlib
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("reasoning_gym")

from swarm_node.protocol.task_id import TaskId  # noqa: E402
from swarm_node.rewards.registry import get_family, make_task, resolve_families  # noqa: E402
from swarm_node.rewards.reserved import held_out_set  # noqa: E402
from swarm_node.rewards.rg_source import RL_SWARM_PRESET, rg_version  # noqa: E402
from swarm_node.rewards.scoring import score  # noqa: E402
from swarm_node.rewards.sources import TaskSourceError, load_sources  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
GOLDEN = Path(__file__).parent / "golden"


def _pinned() -> str:
    m = re.search(r'"reasoning-gym==([0-9.]+)"', (ROOT / "pyproject.toml").read_text())
    assert m, "pyproject.toml pins reasoning-gym in its extra"
    return m.group(1)


def test_the_installed_version_is_the_pinned_one_and_its_golden_ids_regenerate():
    assert rg_version() == _pinned()
    golden = json.loads((GOLDEN / f"reasoning_gym-{_pinned()}.json").read_text())
    resolve_families(["rg:rl-swarm"])
    for task_id, want in golden["ids"].items():
        t = make_task(task_id)
        assert hashlib.sha256((t.question + "\0" + t.answer).encode()).hexdigest()[:16] == want, task_id


def test_the_rl_swarm_preset_is_its_nine_datasets_each_a_family():
    names = resolve_families(["rg:rl-swarm"])
    assert len(names) == len(RL_SWARM_PRESET) == 9
    for name, dataset in zip(names, RL_SWARM_PRESET):
        assert name.startswith("rg_" + dataset[:19] + "_") and len(name) <= 32
        assert get_family(name).max_difficulty == 1 and dataset in get_family(name).description


def test_another_config_is_another_family_and_the_config_shapes_the_items():
    [default] = resolve_families(["rg:basic_arithmetic"])
    [short] = resolve_families(['rg:basic_arithmetic:{"min_terms": 2, "max_terms": 2, "max_digits": 1}'])
    assert short != default
    for seed in range(20):
        q = make_task(TaskId(short, seed, 1)).question
        assert len(re.findall(r"\d+", q)) == 2, q  # two one-digit terms, as configured


def test_scoring_is_the_datasets_own_with_partial_credit():
    [frac] = resolve_families(["rg:fraction_simplification"])
    task = make_task(TaskId(frac, 7, 1))
    right = score(task, f"<answer>{task.answer}</answer>")
    assert right.correctness == 1.0 and right.verified
    partial = score(task, "<answer>1/2</answer>")  # a fraction, not this one: reasoning-gym gives 0.05
    assert 0 < partial.correctness < 1 and not partial.verified
    assert score(task, "no answer block").correctness == 0.0


def test_a_node_reserves_held_out_questions_of_a_reasoning_gym_family():
    [name] = resolve_families(["rg:basic_arithmetic"])
    held = held_out_set([name], [1], 8)
    assert len(held.ids) == 8 and all(TaskId.parse(str(i)).family == name for i in held.ids)


@pytest.mark.parametrize("spec, words", [
    ("rg:no_such_dataset", "unknown reasoning-gym dataset 'no_such_dataset'"),
    ('rg:basic_arithmetic:{"min_terms": 9, "max_terms": 2}', "reasoning-gym refused basic_arithmetic"),
    ('rg:basic_arithmetic:{"seed": 3}', "seed and size come from each task id"),
    ("rg:basic_arithmetic:{not json", "the config after the dataset name is not JSON"),
    ("rg:basic_arithmetic:[1]", "must be a JSON object"),
])
def test_a_bad_reasoning_gym_entry_is_refused_with_the_reason(spec, words):
    with pytest.raises(TaskSourceError) as e:
        load_sources(spec)
    assert words in str(e.value) and spec.split(":")[0] in str(e.value)


@pytest.mark.subprocess
def test_the_same_ids_regenerate_in_another_process():
    names = resolve_families(["rg:rl-swarm"])
    ids = [str(TaskId(n, s, 1)) for n in names for s in (3, 2**50)]
    here = [[make_task(i).question, make_task(i).answer] for i in ids]
    code = ("import json\nfrom rewards.registry import resolve_families, make_task\n"
            "resolve_families(['rg:rl-swarm'])\n"
            f"print(json.dumps([[make_task(i).question, make_task(i).answer] for i in {ids!r}]))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=180, cwd=ROOT)
    assert done.returncode == 0, done.stderr[-2000:]
    assert json.loads(done.stdout) == here


def test_generating_in_several_threads_leaves_stdout_as_it_was():
    """Some generators print (bf): their output is swallowed, and the swap of sys.stdout that does it
    is one thread at a time, or a thread could restore another's buffer for good."""
    import threading

    [bf] = resolve_families(["rg:bf"])
    out = sys.stdout

    def work(k):
        for s in range(60):
            make_task(TaskId(bf, 1000 * k + s, 1))

    threads = [threading.Thread(target=work, args=(k,)) for k in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sys.stdout is out
