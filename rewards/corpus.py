"""Text corpora drawn from the task families: supervised warm-start pairs, tokenizer text.

Both are deterministic in ``seed`` so every node can rebuild the same warm start and the
same tokenizer without shipping data.
"""

from __future__ import annotations

import itertools
import logging
import random
from collections.abc import Callable, Iterator, Sequence

from swarm_node.rewards.answer import format_answer
from swarm_node.rewards.errors import TaskError
from swarm_node.rewards.registry import FAMILIES, make_task, sample_task_ids
from swarm_node.protocol.task_id import MAX_SEED, TaskId
from swarm_node.rewards.task import ALPHABET, PROMPT_TEMPLATE

__all__ = ["supervised_examples", "tokenizer_corpus"]

logger = logging.getLogger(__name__)


def supervised_examples(
    n: int,
    seed: int,
    families: Sequence[str] | None = None,
    difficulties: Sequence[int] = (1, 2, 3),
    exclude: Callable[[TaskId], bool] | None = None,
) -> list[tuple[str, str]]:
    """``n`` ``(prompt, completion)`` pairs with ``completion = format_answer(answer)``.

    Family and difficulty are drawn uniformly from the choices (all families by default); a task
    ``exclude`` is true for (a held-out question) is drawn again.
    """
    _check_seed(seed)
    task_ids = sample_task_ids(random.Random(seed), n, families, difficulties, exclude)
    tasks = [make_task(task_id) for task_id in task_ids]
    return [(task.prompt, format_answer(task.answer)) for task in tasks]


def tokenizer_corpus(n: int, seed: int) -> Iterator[str]:
    """Yield ``1 + n`` prompt+completion texts for training the BPE tokenizer.

    The first text is a primer holding every ``ALPHABET`` character (so the vocabulary covers
    characters a small sample might miss); the next ``n`` cycle through every (family,
    difficulty) pair in order, so any ``n`` at least the number of pairs (25) covers them all.
    """
    if type(n) is not int or n < 0:
        raise TaskError(f"n must be a non-negative int, got {n!r}")
    _check_seed(seed)
    # Validated eagerly above; the texts themselves are produced lazily.
    return _corpus_texts(n, seed)


def _corpus_texts(n: int, seed: int) -> Iterator[str]:
    rng = random.Random(seed)
    characters = "".join(sorted(ALPHABET))
    yield PROMPT_TEMPLATE.format(question=characters) + format_answer(characters)
    pairs = [
        (name, level)
        for name, family in FAMILIES.items()
        for level in range(1, family.max_difficulty + 1)
    ]
    for name, level in itertools.islice(itertools.cycle(pairs), n):
        task = make_task(TaskId(name, rng.randint(0, MAX_SEED), level))
        yield task.prompt + format_answer(task.answer)
    logger.debug("tokenizer corpus: %d task texts over %d family/difficulty pairs", n, len(pairs))


def _check_seed(seed: int) -> None:
    # random.Random accepts almost anything; only ints keep corpora reproducible by value.
    if type(seed) is not int:
        raise TaskError(f"seed must be an int, got {seed!r}")
