"""The default model's recipe without building it: the digest that names its cache folder, and the
warm start's examples (a recipe may teach some families only: scripts/exp_skill_spread.py)."""

from __future__ import annotations

import re
from dataclasses import replace

from policies.default_model import DefaultModelRecipe, warm_start_examples

COUNTING_PROMPT = re.compile(r"Q: (count [a-z] in|len|rev) [a-z]+\nA: ")  # the counting family's three questions


def test_the_default_recipes_digest_is_pinned():
    # Every user's cached default model is named by this digest: a change rebuilds it for everyone.
    # sft_families, added later, is left out of it while empty (every family, as before).
    # (77abac8818ad until held_out_tasks went from 16 to 64 for the demo's evaluation.)
    assert DefaultModelRecipe().digest() == "5b990cab1b56"
    assert replace(DefaultModelRecipe(), sft_families=("counting",)).digest() != "5b990cab1b56"


def test_the_warm_start_leaves_out_every_smaller_evaluation_too():
    """A node evaluating on fewer tasks per family than the recipe left out evaluates on a subset of
    them: each count's held-out set is a prefix of a larger count's."""
    from rewards.registry import all_families
    from rewards.reserved import held_out_set

    for levels in ([1], [2], [1, 2]):
        small = held_out_set(all_families(), levels, 16).ids
        assert set(small) <= set(held_out_set(all_families(), levels, DefaultModelRecipe().held_out_tasks).ids)


def test_a_recipe_with_sft_families_warm_starts_on_those_families_only():
    recipe = replace(DefaultModelRecipe(), sft_families=("counting",), sft_difficulties=(2,), sft_steps=2)
    pairs = warm_start_examples(recipe)
    assert len(pairs) == 2 * recipe.sft_batch_size
    assert all(COUNTING_PROMPT.fullmatch(p) for p, _ in pairs), [p for p, _ in pairs if not COUNTING_PROMPT.fullmatch(p)]
    every = warm_start_examples(replace(recipe, sft_families=()))  # the default: every family
    assert sum(not COUNTING_PROMPT.fullmatch(p) for p, _ in every) > len(every) / 2
