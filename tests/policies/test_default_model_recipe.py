"""The default model's recipe without building it: the digest that names its cache folder, and the
warm start's examples (a recipe may teach some families only: scripts/exp_skill_spread.py)."""

from __future__ import annotations

import re
from dataclasses import replace

from swarm_node.policies.default_model import DefaultModelRecipe, warm_start_examples

COUNTING_PROMPT = re.compile(r"Q: (count [a-z] in|len|rev) [a-z]+\nA: ")  # the counting family's three questions


def test_the_default_recipes_digest_is_pinned():
    # Every user's cached default model is named by this digest: a change rebuilds it for everyone.
    # sft_families, added later, is left out of it while empty (every family, as before).
    # (77abac8818ad until held_out_tasks went from 16 to 64 for the demo's evaluation; 5b990cab1b56
    # until max_position_embeddings went from 128 to 1024 for reasoning-gym's long questions, which
    # changes no weight: RoPE has none per position; 01ced5d202c5 until held_out_tasks went to 256
    # and format_version to 4 for evaluations with power, issue 37.)
    assert DefaultModelRecipe().digest() == "ddb9dba97039"
    assert replace(DefaultModelRecipe(), sft_families=("counting",)).digest() != "ddb9dba97039"
    # The recipe before, named as before: its build is unchanged (its 64 tasks a family are the same
    # questions), and it is what a run trained on it was trained on.
    assert replace(DefaultModelRecipe(), held_out_tasks=64, format_version=3).digest() == "01ced5d202c5"


def test_the_warm_start_leaves_out_every_smaller_evaluation_too():
    """A node evaluating on fewer tasks per family than the recipe left out evaluates on a subset of
    them: each count's held-out set is a prefix of a larger count's."""
    from swarm_node.rewards.registry import all_families
    from swarm_node.rewards.reserved import held_out_set

    for levels in ([1], [2], [1, 2]):
        left_out = set(held_out_set(all_families(), levels, DefaultModelRecipe().held_out_tasks).ids)
        for n in (16, 64, 128):
            assert set(held_out_set(all_families(), levels, n).ids) <= left_out, (levels, n)


def test_a_node_is_warned_when_its_evaluation_may_ask_what_the_warm_start_taught():
    from swarm_node.policies.default_model import held_out_warning

    n = DefaultModelRecipe().held_out_tasks
    assert n >= 256  # issue 37: 256 questions a family can be evaluated without contamination
    for levels in ([1], [2], [1, 2]):
        assert held_out_warning(["counting", "arithmetic"], levels, n) is None
    more = held_out_warning(["counting", "arithmetic"], [2], n + 1)
    assert f"eval.tasks_per_family {n + 1} is more than the {n}" in more and "arithmetic, counting" in more
    other_levels = held_out_warning(["counting"], [1, 2, 3], 16)  # level 3 interleaved: other questions at 1 and 2
    assert "not [1, 2, 3]" in other_levels and f"at most {n} tasks a family" in other_levels
    assert held_out_warning(["counting"], [2, 1], 16) is not None  # its level order asks other questions
    # Nothing the warm start taught: no family of it, no level of it, or a recipe teaching another family.
    assert held_out_warning(["jsonl:rows.jsonl"], [2], 1024) is None
    assert held_out_warning(["counting"], [3], 1024) is None
    assert held_out_warning(["boolean"], [2], 1024, replace(DefaultModelRecipe(), sft_families=("counting",))) is None


def test_a_recipe_with_sft_families_warm_starts_on_those_families_only():
    recipe = replace(DefaultModelRecipe(), sft_families=("counting",), sft_difficulties=(2,), sft_steps=2)
    pairs = warm_start_examples(recipe)
    assert len(pairs) == 2 * recipe.sft_batch_size
    assert all(COUNTING_PROMPT.fullmatch(p) for p, _ in pairs), [p for p, _ in pairs if not COUNTING_PROMPT.fullmatch(p)]
    every = warm_start_examples(replace(recipe, sft_families=()))  # the default: every family
    assert sum(not COUNTING_PROMPT.fullmatch(p) for p, _ in every) > len(every) / 2


def test_the_context_length_changes_no_weight(tmp_path):
    """Why 1024 positions cost the embedded model nothing: RoPE has no weights per position, so the
    same recipe at 128 and at 1024 builds the same model, warm start included."""
    import torch
    from safetensors.torch import load_file

    from swarm_node.policies.default_model import build_default_model
    from tests.conftest import TINY_RECIPE

    short = replace(TINY_RECIPE, sft_steps=5, max_position_embeddings=128)
    for recipe, name in ((short, "short"), (replace(short, max_position_embeddings=1024), "long")):
        build_default_model(tmp_path / name, recipe)
    a, b = (load_file(tmp_path / n / "model.safetensors") for n in ("short", "long"))
    assert set(a) == set(b) and all(torch.equal(a[k], b[k]) for k in a)
