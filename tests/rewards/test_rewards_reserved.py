"""The held-out questions (rewards/reserved.py): one evaluation task per question, never more than
a quarter of a level's questions, and neither training nor a seed outside the held-out space can
reach one."""

from __future__ import annotations

import json
import random

from swarm_node.node.run.rollouts import round_task_ids
from swarm_node.protocol.task_id import TaskId
from swarm_node.rewards.held_out import is_held_out
from swarm_node.rewards.registry import make_task, resolve_families
from swarm_node.rewards.reserved import MAX_RESERVED_SHARE, held_out_set, level_size, why_unevaluated

FAMILIES = ["arithmetic", "lists", "base", "boolean", "counting"]


def test_one_task_per_question_and_the_set_holds_exactly_their_questions():
    h = held_out_set(FAMILIES, [1], 16)
    keys = [(t.family, make_task(t).question) for t in h.ids]
    assert len(keys) == len(set(keys)) and set(keys) == h.questions
    assert all(is_held_out(t.seed) for t in h.ids)
    assert held_out_set(FAMILIES, [1], 16) is h  # computed once


def test_a_small_level_gives_up_at_most_a_quarter_of_its_questions():
    # boolean and base conversion at level 1 have 10 and 16 questions: 2 and 4 are held out
    assert (level_size("boolean", 1), level_size("base", 1)) == (10, 16)
    h = held_out_set(["boolean", "base", "arithmetic"], [1], 16)
    per = {f: sum(t.family == f for t in h.ids) for f in ("boolean", "base", "arithmetic")}
    assert per == {"boolean": int(10 * MAX_RESERVED_SHARE), "base": int(16 * MAX_RESERVED_SHARE), "arithmetic": 16}


def test_a_held_out_question_is_held_out_under_any_seed():
    h = held_out_set(["arithmetic"], [1], 16)
    rng = random.Random(0)
    other = next(t for t in (TaskId("arithmetic", rng.randint(0, 2**62), 1) for _ in range(100_000)) if h.holds_id(t))
    assert not is_held_out(other.seed) and h.holds(make_task(other))


def test_training_never_draws_a_held_out_question():
    h = held_out_set(["arithmetic", "boolean"], [1], 16)
    def drawn(held_out):
        return [t for step in range(200) for t in round_task_ids(7, step, 8, ["arithmetic", "boolean"], [1], held_out)]

    plain, kept_out = drawn(None), drawn(h)
    assert sum(map(h.holds_id, plain)) > 100  # without the reservation training meets them often...
    assert not any(map(h.holds_id, kept_out))  # ...with it, never
    assert {t.family for t in kept_out} == {"arithmetic", "boolean"} and len(kept_out) == 1600


def test_the_embedded_models_warm_start_leaves_out_the_default_evaluations_questions():
    from swarm_node.policies.default_model import DefaultModelRecipe, _held_out
    from swarm_node.rewards.corpus import supervised_examples
    from swarm_node.rewards.registry import all_families

    recipe = DefaultModelRecipe()
    excluded = _held_out(recipe)
    default_eval = held_out_set(all_families(), [1], 16)  # the node's defaults: every family, level 1
    assert all(excluded(t) for t in default_eval.ids)
    prompts = {make_task(t).prompt for t in default_eval.ids}
    plain = supervised_examples(3000, seed=recipe.seed, difficulties=recipe.sft_difficulties)
    kept = supervised_examples(3000, seed=recipe.seed, difficulties=recipe.sft_difficulties, exclude=excluded)
    assert any(p in prompts for p, _ in plain) and not any(p in prompts for p, _ in kept)


def test_a_family_too_small_to_hold_out_a_question_is_named_unevaluated(tmp_path):
    rows = tmp_path / "tiny.jsonl"  # 3 questions: a quarter of them is none
    rows.write_text("".join(json.dumps({"question": f"q{i}", "answer": str(i)}) + "\n" for i in range(3)))
    [tiny] = resolve_families([f"jsonl:{rows}"])
    h = held_out_set(["arithmetic", tiny], [1], 4)
    assert h.unevaluated == (tiny,) and {t.family for t in h.ids} == {"arithmetic"}
    assert not any(f == tiny for f, _ in h.questions)  # all 3 stay for training
    assert "no level has the 4 questions it takes to hold one out (level 1: 3" in why_unevaluated(tiny, [1])
    assert held_out_set(["arithmetic"], [1], 4).unevaluated == ()


def _ids_digest(h) -> str:
    import hashlib

    ids = [[t.family, str(t.seed), str(t.difficulty)] for t in h.ids]
    return hashlib.sha256(json.dumps(ids).encode()).hexdigest()[:16]


def test_a_large_level_is_drawn_further_for_an_evaluation_of_many_questions():
    """Level-2 counting has about 1,700 questions; 512 draws show 368, whose quarter (92) capped an
    evaluation of 256 tasks. Drawn further, the level shows what 256 need (4 x 256)."""
    assert level_size("counting", 2) == 368
    assert level_size("counting", 2, need=4 * 64) == 368  # up to 64 tasks: the first draws' answer
    assert level_size("counting", 2, need=4 * 256) >= 4 * 256
    assert level_size("counting", 1, need=4 * 256) == 55  # a small level: its draws repeat, not drawn further
    assert len(held_out_set(["counting"], [2], 256).ids) == 256


def test_evaluations_of_up_to_64_tasks_a_family_ask_what_they_asked_before_the_further_draws():
    # The ids computed before level_size drew further (pinned): resumed runs keep their questions.
    from swarm_node.rewards.registry import BUILT_IN

    pinned = {(16, (1,)): "9edce1237f76bba1", (64, (1, 2)): "52245102d73ca57a", (64, (2,)): "e36aa665c130d502",
              (64, (3,)): "4a1e3cc620abf526"}
    assert {k: _ids_digest(held_out_set(list(BUILT_IN), list(k[1]), k[0])) for k in pinned} == pinned


def test_each_count_s_held_out_set_is_a_prefix_of_a_larger_count_s():
    """What lets the embedded model's warm start leave out every smaller evaluation by leaving out
    the largest (policies/default_model.py), now that a larger count may draw a level further."""
    from itertools import combinations

    from swarm_node.rewards.registry import BUILT_IN

    for levels in (list(c) for r in (1, 2, 3) for c in combinations([1, 2, 3], r)):
        big = held_out_set(list(BUILT_IN), levels, 256).ids
        for n in (64, 65, 128):
            small = held_out_set(list(BUILT_IN), levels, n).ids
            assert set(small) <= set(big), (levels, n)
