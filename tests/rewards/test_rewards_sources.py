"""Task sources (rewards/sources.py): a JSONL dataset and a user's family module become families
named by their content, regenerate the same task from an id in another process, score with the
scorer they name, and are refused at load with the reason (the file, the line, the seed)."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from swarm_node.protocol.task_id import TaskId
from swarm_node.rewards.errors import TaskError, UnknownTaskFamily
from swarm_node.rewards.registry import all_families, get_family, make_task, resolve_families, sample_task_ids
from swarm_node.rewards.reserved import held_out_set
from swarm_node.rewards.scoring import score
from swarm_node.rewards.sources import TaskSourceError, load_source

ROWS = [{"question": "capital of france", "answer": "Paris"},
        {"question": "2 + 2", "answer": "4"},
        {"question": "opposite of up", "answer": "down"},
        {"question": "largest planet", "answer": "Jupiter", "level": 2}]


def _jsonl(path: Path, rows=ROWS, extra: str = "") -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows) + extra)
    return path


def test_a_dataset_is_a_family_named_by_its_content(tmp_path):
    [name] = resolve_families([f"jsonl:{_jsonl(tmp_path / 'Trivia Set.jsonl')}"])
    assert name.startswith("trivia_set_") and len(name) == len("trivia_set_") + 8 and name in all_families()
    fam = get_family(name)
    assert fam.max_difficulty == 2 and "4 tasks" in fam.description and "scorer auto" in fam.description
    # Level 1 draws among the three level-1 rows, level 2 the one level-2 row.
    level1 = {make_task(TaskId(name, seed, 1)).question for seed in range(200)}
    assert level1 == {"capital of france", "2 + 2", "opposite of up"}
    assert make_task(TaskId(name, 7, 2)).answer == "Jupiter"
    # The same rows written another way (key order, spacing, a blank line) are the same family...
    other = tmp_path / "trivia_set.jsonl"
    other.write_text("\n".join(json.dumps(dict(reversed(list(r.items()))), indent=None, separators=(", ", " : "))
                               for r in ROWS) + "\n\n")
    assert resolve_families([f"jsonl:{other}"]) == [name]
    # ... and one answer changed is another family, which a node holding the first does not have.
    changed = _jsonl(tmp_path / "trivia_set2.jsonl", [*ROWS[:3], {**ROWS[3], "answer": "Saturn"}])
    [changed_name] = resolve_families([f"jsonl:{changed}"])
    assert changed_name != name and changed_name.startswith("trivia_set2_")


def test_the_datasets_scorer_decides_what_counts_as_right(tmp_path):
    auto = resolve_families([f"jsonl:{_jsonl(tmp_path / 'a.jsonl')}"])[0]
    exact = resolve_families([f"jsonl:{_jsonl(tmp_path / 'e.jsonl', [{**r, 'scorer': 'exact'} for r in ROWS])}"])[0]
    for name, want in ((auto, [1.0, 1.0, 0.0]), (exact, [1.0, 0.0, 0.0])):
        task = next(make_task(TaskId(name, s, 1)) for s in range(100)
                    if make_task(TaskId(name, s, 1)).answer == "Paris")
        got = [score(task, f"<answer>{a}</answer>").correctness for a in ("Paris", " paris ", "Lyon")]
        assert got == want, name
    # "auto" compares integers by value: "04" is 4.
    four = next(make_task(TaskId(auto, s, 1)) for s in range(100) if make_task(TaskId(auto, s, 1)).answer == "4")
    assert score(four, "<answer>04</answer>").correctness == 1.0


@pytest.mark.parametrize("content, words", [
    ('{"question": "a", "answer": "b"}\nnot json\n', "line 2: not JSON"),
    ('["a", "b"]\n', "line 1: expected an object"),
    ('{"question": "a"}\n', "line 1: question and answer must be non-empty strings"),
    ('{"question": "a", "answer": "b", "hint": "c"}\n', "line 1: unknown keys ['hint']"),
    ('{"question": "a", "answer": "b", "level": 0}\n', "line 1: level must be an int in 1..64"),
    ('{"question": "a", "answer": "b", "scorer": "fuzzy"}\n', "line 1: unknown scorer 'fuzzy'; one of auto, text, exact"),
    ('{"question": "a", "answer": "b"}\n{"question": "c", "answer": "d", "scorer": "exact"}\n',
     "lines name different scorers ['auto', 'exact']"),
    ('{"question": "a", "answer": "b", "level": 3}\n', "levels run 1..3 with none at [1, 2]"),
    ("\n\n", "no tasks in it"),
])
def test_a_bad_dataset_is_refused_naming_the_file_and_line(tmp_path, content, words):
    path = tmp_path / "bad.jsonl"
    path.write_text(content)
    with pytest.raises(TaskSourceError) as e:
        load_source(f"jsonl:{path}")
    assert words in str(e.value) and str(path) in str(e.value)


def test_missing_and_undecodable_files_are_refused(tmp_path):
    with pytest.raises(TaskSourceError, match="No such file"):
        load_source(f"jsonl:{tmp_path / 'none.jsonl'}")
    (tmp_path / "latin.jsonl").write_bytes(b'{"question": "caf\xe9", "answer": "x"}\n')
    with pytest.raises(TaskSourceError, match="not UTF-8"):
        load_source(f"jsonl:{tmp_path / 'latin.jsonl'}")
    with pytest.raises(TaskSourceError, match="a task source is module:"):
        load_source("yaml:x")


MODULE = '''
from swarm_node.rewards import Family

def generate(rng, difficulty):
    a, b = rng.randint(1, 9 * difficulty), rng.randint(1, 9 * difficulty)
    return f"{a} times {b}", str(a * b)

FAMILY = Family(name="Times Table", max_difficulty=3, description="multiply two numbers",
                generator=generate, normalizer=lambda s: s.strip().lstrip("0") or "0")
'''


def _module(tmp_path: Path, text: str = MODULE, name: str = "times.py") -> Path:
    path = tmp_path / name
    path.write_text(textwrap.dedent(text))
    return path


def test_a_users_family_module_is_a_family_named_by_what_it_generates(tmp_path):
    [name] = resolve_families([f"module:{_module(tmp_path)}"])
    assert name.startswith("times_table_") and get_family(name).max_difficulty == 3
    task = make_task(TaskId(name, 11, 2))
    a, b = (int(x) for x in task.question.split(" times "))
    assert task.answer == str(a * b) and score(task, f"<answer>0{a * b}</answer>").correctness == 1.0
    ids = sample_task_ids(__import__("random").Random(0), 20, [name], [1, 2, 3])
    assert all(i.family == name for i in ids)
    # The same code under another file name is the same family; one changed answer is not.
    assert resolve_families([f"module:{_module(tmp_path, name='copy.py')}"]) == [name]
    [other] = resolve_families([f"module:{_module(tmp_path, MODULE.replace('str(a * b)', 'str(a * b + 1)'), 'off.py')}"])
    assert other != name
    # A version that differs only where the probes never look (one question in 729) is another
    # family too: the digest covers the module's file, not only what the probes see.
    rare = MODULE.replace("str(a * b)", "str(a * b + (a == b == 7 and difficulty == 3))")
    assert resolve_families([f"module:{_module(tmp_path, rare, 'rare.py')}"]) != [name]
    # The same questions scored another way (spaces now count) are another family too.
    [strict] = resolve_families([f"module:{_module(tmp_path, MODULE.replace('s.strip().lstrip', 's.lstrip'), 'strict.py')}"])
    assert strict != name


@pytest.mark.parametrize("text, words", [
    ("x = 1\n", "defines no FAMILY"),
    ("raise RuntimeError('boom')\n", "does not import: RuntimeError: boom"),
    (MODULE.replace("rng.randint(1, 9 * difficulty), rng", "__import__('random').randint(1, 9), rng"),
     "not deterministic"),
    (MODULE.replace("return f", "if difficulty == 2: raise ValueError('no level 2')\n    return f"),
     "the generator raised at seed 0, level 2: ValueError: no level 2"),
    (MODULE.replace('return f"{a} times {b}", str(a * b)', "return a * b"), "must return (question, answer)"),
    (MODULE.replace('lambda s: s.strip().lstrip("0") or "0"', "lambda s: str(int(s))"),
     "the normalizer raised on"),
    (MODULE.replace("max_difficulty=3", "max_difficulty=0"), "max_difficulty must be an int in 1..64"),
])
def test_a_bad_family_module_is_refused_with_the_reason(tmp_path, text, words):
    with pytest.raises(TaskSourceError) as e:
        load_source(f"module:{_module(tmp_path, text, 'bad.py')}")
    assert words in str(e.value), str(e.value)
    with pytest.raises(TaskSourceError, match="no such file"):
        load_source(f"module:{tmp_path / 'none.py'}")
    with pytest.raises(TaskSourceError, match="does not import: ModuleNotFoundError"):
        load_source("module:no_such_package.tasks")


def test_a_generator_or_scorer_failing_later_is_the_tasks_error_never_a_crash(tmp_path):
    flaky = MODULE.replace("return f", "if a == 7 and b == 7 and difficulty == 3: raise ZeroDivisionError('x')\n    return f")
    [name] = resolve_families([f"module:{_module(tmp_path, flaky, 'flaky.py')}"])
    bad = next(TaskId(name, s, 3) for s in range(10**5)
               if (lambda r: (r.randint(1, 27), r.randint(1, 27)))(TaskId(name, s, 3).rng()) == (7, 7))
    with pytest.raises(TaskError, match="failed to generate .*ZeroDivisionError"):
        make_task(bad)
    # Training draws step over it (said in the log) instead of stopping.
    ids = sample_task_ids(__import__("random").Random(1), 300, [name], [3])
    assert bad not in ids and len(ids) == 300
    picky = MODULE.replace('lambda s: s.strip().lstrip("0") or "0"',
                           'lambda s: s.strip() if len(s) < 40 else s[10**6]')
    [name] = resolve_families([f"module:{_module(tmp_path, picky, 'picky.py')}"])
    task = make_task(TaskId(name, 3, 1))
    assert score(task, "<answer>" + "9" * 50 + "</answer>").correctness == 0.0  # raised on the model's text: wrong


def test_held_out_questions_are_reserved_for_a_dataset_too(tmp_path):
    rows = [{"question": f"q{i}", "answer": str(i)} for i in range(40)]
    [name] = resolve_families([f"jsonl:{_jsonl(tmp_path / 'd.jsonl', rows)}"])
    held = held_out_set([name], [1], 16)
    # At most a quarter of the dataset's questions are kept for evaluation...
    assert 1 <= len(held.questions) <= 10
    # ... and training never draws one of them.
    drawn = sample_task_ids(__import__("random").Random(2), 400, [name], [1], exclude=held.holds_id)
    assert not {(name, make_task(i).question) for i in drawn} & held.questions


def test_an_id_of_a_source_this_node_lacks_is_an_unknown_family(tmp_path):
    [name] = resolve_families([f"jsonl:{_jsonl(tmp_path / 'd.jsonl')}"])
    with pytest.raises(UnknownTaskFamily):
        make_task(TaskId(name[:-8] + "00000000", 1, 1))


@pytest.mark.subprocess
def test_the_same_id_regenerates_the_same_task_in_another_process(tmp_path):
    data, module = _jsonl(tmp_path / "d.jsonl"), _module(tmp_path)
    specs = [f"jsonl:{data}", f"module:{module}"]
    names = resolve_families(specs)
    ids = [TaskId(n, s, 1) for n in names for s in (0, 5, 2**40)]
    here = [(make_task(i).question, make_task(i).answer) for i in ids]
    code = ("import json, sys\nfrom rewards.registry import resolve_families, make_task\n"
            f"resolve_families({specs!r})\n"
            f"print(json.dumps([[make_task(i).question, make_task(i).answer] for i in {[str(i) for i in ids]!r}]))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                          cwd=Path(__file__).resolve().parents[2])
    assert done.returncode == 0, done.stderr[-2000:]
    assert [tuple(x) for x in json.loads(done.stdout)] == here


def test_a_tiny_dataset_keeps_its_questions_for_training(tmp_path):
    """A level of fewer than four questions holds none out (a quarter of it rounds to none): a
    1-row dataset still trains, where holding out its one question would leave nothing to draw."""
    [one] = resolve_families([f"jsonl:{_jsonl(tmp_path / 'one.jsonl', ROWS[:1])}"])
    [three] = resolve_families([f"jsonl:{_jsonl(tmp_path / 'three.jsonl', ROWS[:3])}"])
    for name in (one, three):
        held = held_out_set([name], [1], 16)
        assert held.ids == () and held.questions == frozenset()
        assert len(sample_task_ids(__import__("random").Random(0), 10, [name], [1], exclude=held.holds_id)) == 10


def test_a_config_keeps_the_family_names_it_was_checked_with(tmp_path):
    """A dataset edited while a node runs does not rename the node's family under it: its held-out
    set, its evaluation and the ids it draws stay those of the content it started with."""
    from swarm_node.node.config.config import load_config

    path = _jsonl(tmp_path / "live.jsonl")
    cfg = load_config(None, {"tasks.families": [f"jsonl:{path}"]})
    before = cfg.tasks.names
    path.write_text(path.read_text() + json.dumps({"question": "new", "answer": "1"}) + "\n")
    assert cfg.tasks.names == before
    assert load_config(None, {"tasks.families": [f"jsonl:{path}"]}).tasks.names != before  # a new start sees it
