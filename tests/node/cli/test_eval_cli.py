"""``swarm-node eval RUN``: a saved checkpoint of a tiny run evaluated after the fact reproduces the
evaluation the run recorded at that step; folders that are not runs, runs without checkpoints and
missing steps are clear errors."""

from __future__ import annotations

import json

import pytest

from swarm_node.node.cli import main
from swarm_node.node.cli.eval import table
from swarm_node.node.observe.metrics import read_metrics
from swarm_node.node.config.config import NodeConfig, load_config
from tests.helpers.swarm_helpers import train_to_end

pytestmark = pytest.mark.usefixtures("one_torch_thread")


@pytest.fixture(scope="module")
def tiny_run(warm_tiny_model_dir, tmp_path_factory):
    run = tmp_path_factory.mktemp("eval-cli") / "run"
    cfg = load_config(None, {"model.name": str(warm_tiny_model_dir), "run.dir": str(run), "run.progress": "off",
                             "run.plot": False, "generation.prompts_per_step": 2, "generation.num_generations": 2,
                             "generation.max_completion_length": 6, "train.steps": 4, "run.checkpoint_every": 2,
                             "eval.every": 2, "eval.tasks_per_family": 2, "eval.samples": 2,
                             "tasks.families": ["arithmetic", "boolean"]})

    train_to_end(cfg)
    return run


def test_eval_reproduces_the_runs_own_evaluation_at_a_step(tiny_run, capsys):
    assert main(["eval", str(tiny_run), "--step", "2"]) == 0
    out = capsys.readouterr().out
    written = json.loads((tiny_run / "eval" / "step_2.json").read_text())
    recorded = next(r["eval"] for r in read_metrics(tiny_run / "metrics.jsonl") if r["step"] == 2)
    for key in ("greedy", "sampled", "n", "families"):
        assert written[key] == recorded[key], key
    assert written["step"] == 2 and written["policy_version"] == 2 and written["checkpoint"].endswith("step_000002")
    assert written["settings"]["tasks_per_family"] == 2
    assert f"held-out evaluation of {tiny_run} at step 2 (policy v2): 2 tasks per family, greedy + 2 samples" in out
    assert "greedy pass@1  sampled pass@1" in out and "\nboolean" in out and "\nall              4" in out
    assert f"wrote {tiny_run / 'eval' / 'step_2.json'}" in out


def test_eval_takes_the_newest_checkpoint_and_flags_override_the_runs_settings(tiny_run, capsys):
    assert main(["eval", str(tiny_run), "--eval.tasks_per_family", "1", "--eval.greedy", "false",
                 "--eval.pass_k", "2"]) == 0
    written = json.loads((tiny_run / "eval" / "step_4.json").read_text())
    assert written["step"] == 4 and written["n"] == 2 and written["greedy"] is None and written["k"] == 2
    out = capsys.readouterr().out
    assert "greedy pass@1" not in out and "pass@2" in out


def test_eval_errors_say_what_is_wrong(tiny_run, tmp_path, capsys):
    def fails(*argv) -> str:
        assert main(["eval", *map(str, argv)]) == 2
        return capsys.readouterr().err

    assert "no such run folder" in fails(tmp_path / "nowhere")
    assert "is not a run folder: it has no config.json" in fails(tmp_path)
    (tmp_path / "sim.json").write_text("{}")
    assert "pass one node's, e.g." in fails(tmp_path)
    (tmp_path / "config.json").write_text(NodeConfig().to_json())
    assert "has no checkpoint to evaluate" in fails(tmp_path)
    assert "has no checkpoint of step 3: it has steps 2, 4" in fails(tiny_run, "--step", "3")
    assert "eval.samples" in fails(tiny_run, "--eval.pass_k", "3")  # pass@3 from 2 samples
    with pytest.raises(SystemExit) as stop:  # only the evaluation's flags: argparse refuses the others
        main(["eval", str(tiny_run), "--train.steps", "3"])
    assert stop.value.code == 2 and "unrecognized arguments: --train.steps" in capsys.readouterr().err


def test_eval_help_explains(capsys):
    with pytest.raises(SystemExit):
        main(["eval", "--help"])
    out = capsys.readouterr().out
    assert "held-out" in out and "RUN/eval/step_N.json" in out and "--step N" in out and "--eval.samples" in out


def test_eval_names_a_family_without_held_out_questions_and_evaluates_the_others(tiny_run, tmp_path, capsys):
    """A 3-row dataset among the run's families has no held-out question: said, and left out (it
    once failed the whole command with an IndexError); a run of only such families has nothing
    to evaluate, and says so."""
    import shutil

    rows = tmp_path / "few.jsonl"
    rows.write_text("".join(json.dumps({"question": f"q{i}", "answer": str(i)}) + "\n" for i in range(3)))

    def run_with(families: list[str]):
        run = tmp_path / f"run-{len(families)}"
        shutil.copytree(tiny_run, run, ignore=shutil.ignore_patterns("eval"))
        config = json.loads((run / "config.json").read_text())
        config["tasks"]["families"] = families
        (run / "config.json").write_text(json.dumps(config))
        return run

    assert main(["eval", str(run_with(["arithmetic", f"jsonl:{rows}"])), "--eval.samples", "0"]) == 0
    out, err = capsys.readouterr()
    assert "no held-out questions for task family few_" in err and "\narithmetic" in out
    assert "not evaluated (no held-out questions): few_" in out
    assert main(["eval", str(run_with([f"jsonl:{rows}"]))]) == 2
    assert "no task family has held-out questions" in capsys.readouterr().err


def test_the_tables_columns_line_up_whatever_the_family_names():
    """A source's family name carries its digest and passes the old 12 columns: every row is as
    wide as the longest name, so the numbers stay under their headings."""
    stats = {"greedy": 0.5, "sampled": 0.25, "n": 4}
    long = "rg_basic_arithmetic_1a2b3c4d"
    result = {"run_dir": "runs/x", "step": 2, "policy_version": 2, "seconds": 1.0,
              "settings": {"greedy": True, "samples": 2, "tasks_per_family": 4}, **stats, "n": 12,
              "families": {"boolean": stats, long: stats, "arithmetic": stats}}
    _, header, *rows = table(result)
    assert [r.split()[0] for r in rows] == ["boolean", long, "arithmetic", "all"]
    assert header.startswith(f"family{' ' * (len(long) - len('family'))} tasks")
    ends = {h: header.index(h) + len(h) for h in ("tasks", "greedy pass@1", "sampled pass@1")}
    for row in rows:
        assert len(row) == len(header), row
        assert row[:ends["tasks"]].endswith((" 4", "12")), row  # each number ends where its heading does
        assert row[:ends["greedy pass@1"]].endswith("0.500") and row.endswith("0.250"), row
