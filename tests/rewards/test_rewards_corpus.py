"""Supervised warm-start pairs and the tokenizer corpus."""

import pytest

from swarm_node.rewards.answer import extract_answer, is_well_formed
from swarm_node.rewards.corpus import supervised_examples, tokenizer_corpus
from swarm_node.rewards.errors import TaskError, UnknownTaskFamily
from swarm_node.rewards.registry import FAMILIES, make_task
from swarm_node.rewards.task import ALPHABET, PROMPT_TEMPLATE, TaskId


def test_supervised_examples_shape_and_determinism():
    pairs = supervised_examples(100, seed=7)
    assert len(pairs) == 100
    assert pairs == supervised_examples(100, seed=7)
    assert pairs != supervised_examples(100, seed=8)
    for prompt, completion in pairs:
        assert prompt.startswith("Q: ") and prompt.endswith("\nA: ")
        assert is_well_formed(completion)
        assert extract_answer(completion)


def test_supervised_examples_answers_are_ground_truth():
    pairs = supervised_examples(20, seed=1, families=["arithmetic"], difficulties=[1])
    for prompt, completion in pairs:
        expression = prompt[len("Q: ") : -len("=\nA: ")]
        assert int(extract_answer(completion)) == eval(expression)  # test-only eval


def test_supervised_examples_validates():
    with pytest.raises(UnknownTaskFamily):
        supervised_examples(3, seed=0, families=["nope"])
    with pytest.raises(TaskError):
        supervised_examples(-1, seed=0)
    with pytest.raises(TaskError, match="seed"):
        supervised_examples(3, seed="x")  # type: ignore[arg-type]


def test_tokenizer_corpus_covers_everything():
    pairs = [(n, lv) for n, fam in FAMILIES.items() for lv in range(1, fam.max_difficulty + 1)]
    texts = list(tokenizer_corpus(len(pairs) * 4, seed=0))
    assert len(texts) == 1 + len(pairs) * 4
    assert texts == list(tokenizer_corpus(len(pairs) * 4, seed=0))
    characters = set("".join(texts))
    assert ALPHABET <= characters
    # Every character of the template and the answer tags, and of any generated task.
    sample = [make_task(TaskId(n, s, lv)) for n, lv in pairs for s in range(40)]
    for t in sample:
        assert set(t.prompt) | set(t.answer) <= characters
    assert set(PROMPT_TEMPLATE.format(question="")) | set("<answer></answer>") <= characters
    # Task texts cycle through every (family, difficulty) pair, in registry order.
    for index, text in enumerate(texts[1:]):
        question = text[len("Q: ") : text.index("\nA: ")]
        assert family_of(question) == pairs[index % len(pairs)][0], question


def family_of(question):
    words = set(question.replace("(", " ").replace(")", " ").split())
    if question.endswith("="):
        return "arithmetic"
    if "base" in words:
        return "base"
    if words <= {"t", "f", "and", "or", "not"}:
        return "boolean"
    op, first = question.split()[:2]
    if op in ("sort", "max", "min", "sum") or first.lstrip("-").isdigit():
        return "lists"
    return "counting"


def test_tokenizer_corpus_validates_eagerly():
    with pytest.raises(TaskError):
        tokenizer_corpus(-1, seed=0)
    with pytest.raises(TaskError):
        tokenizer_corpus(3, seed=1.5)  # type: ignore[arg-type]
    assert len(list(tokenizer_corpus(0, seed=0))) == 1
