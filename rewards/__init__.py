"""Verifiable rewards, ``swarm_node.rewards``: procedural tasks that any node regenerates from an id,
and scoring.

Of ``swarm_node.protocol`` it imports only the task id (protocol/task_id.py) and the error roots.

Concept -> file:

errors.py                  UnknownTaskFamily, InvalidRewardConfig; re-exports TaskError and
                           InvalidTaskId (their home is protocol/errors.py)
task.py                    Task (question, answer, prompt) for a TaskId (its home is
                           protocol/task_id.py: 'family:seed:difficulty', parse, rng);
                           PROMPT_TEMPLATE; limits ALPHABET, MAX_QUESTION_CHARS, MAX_ANSWER_CHARS
families/family.py         Family: name, max_difficulty, generate(rng, difficulty), normalize
families/normalize.py      shared answer canonicalization helpers
families/arithmetic.py     'arithmetic'  '12+7=' -> '19'
families/lists.py          'lists'       'sort 3 1 2' -> '1 2 3'
families/base_conversion.py 'base'       '13 to base 2' -> '1101'
families/boolean.py        'boolean'     'not t or f' -> 'f'
families/counting.py       'counting'    'count a in abca' -> '2'
registry.py                FAMILIES, all_families, get_family, make_task, sample_task_ids
held_out.py                the held-out seed space (evaluation only): is_held_out, held_out_ids
reserved.py                the held-out questions training and admission keep away from: HeldOutSet, held_out_set
answer.py                  answer format <answer>X</answer>: format_answer, extract_answer,
                           is_well_formed
scoring.py                 Reward, RewardConfig, score, score_batch
corpus.py                  supervised_examples (warm start), tokenizer_corpus (BPE training)
sources.py                 task sources: a user's family module, a JSONL dataset, reasoning-gym
                           (docs/tasks.md)
rg_source.py               reasoning-gym as a task source (``rg:DATASET``): an item regenerated from
                           the id, scored by the dataset's own ``score_answer``
"""

from swarm_node.rewards.answer import (
    ANSWER_CLOSE,
    ANSWER_OPEN,
    extract_answer,
    format_answer,
    is_well_formed,
)
from swarm_node.rewards.corpus import supervised_examples, tokenizer_corpus
from swarm_node.rewards.errors import InvalidRewardConfig, InvalidTaskId, TaskError, UnknownTaskFamily
from swarm_node.rewards.families.family import Family
from swarm_node.rewards.registry import FAMILIES, all_families, get_family, make_task, sample_task_ids
from swarm_node.rewards.scoring import Reward, RewardConfig, score, score_batch
from swarm_node.protocol.task_id import TaskId
from swarm_node.rewards.task import PROMPT_TEMPLATE, Task

__all__ = [
    "ANSWER_CLOSE",
    "ANSWER_OPEN",
    "FAMILIES",
    "Family",
    "PROMPT_TEMPLATE",
    "InvalidRewardConfig",
    "InvalidTaskId",
    "Reward",
    "RewardConfig",
    "Task",
    "TaskError",
    "TaskId",
    "UnknownTaskFamily",
    "all_families",
    "extract_answer",
    "format_answer",
    "get_family",
    "is_well_formed",
    "make_task",
    "sample_task_ids",
    "score",
    "score_batch",
    "supervised_examples",
    "tokenizer_corpus",
]
