"""``--run.log_format json``: stderr carries exactly one JSON object per line, whoever logs.

Python warnings, transformers' and hivemind's own handlers (the p2p daemon's re-logged output
included) and progress bars all used to write plain text next to the JSON records.
"""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
import textwrap
import warnings

import pytest

from swarm_node.node.observe.logs import setup_logging

from tests.helpers.procs import LOOPBACK_FLAGS, Procs, _env  # noqa: E402

from tests.helpers.paths import ROOT as REPO_ROOT


def json_lines(text: str) -> list[dict]:
    """Every line of ``text`` parsed as one JSON object; fails on the first line that is not."""
    out = []
    for i, line in enumerate(text.splitlines()):
        try:
            obj = json.loads(line)
        except json.JSONDecodeError:
            pytest.fail(f"stderr line {i + 1} is not JSON: {line[:300]!r}\n--- stderr ---\n{text[-4000:]}")
        assert isinstance(obj, dict), line
        assert {"ts", "level", "logger", "msg"} <= set(obj), obj
        out.append(obj)
    return out


@pytest.fixture
def restore_logging():
    """Whatever a test sets up, the next test gets today's text logging and the root as it was."""
    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    showwarning = warnings.showwarning
    yield
    setup_logging("INFO", "text")
    root.handlers[:] = handlers
    root.setLevel(level)
    assert warnings.showwarning is showwarning


def test_a_warning_is_one_json_record_with_its_category_and_location(restore_logging, capsys):
    setup_logging("INFO", "json")
    with warnings.catch_warnings():
        warnings.simplefilter("always")
        line = sys._getframe().f_lineno + 1
        warnings.warn("old_api is deprecated\nuse new_api", FutureWarning)
    recs = json_lines(capsys.readouterr().err)
    warned = [r for r in recs if r["logger"] == "py.warnings"]
    assert len(warned) == 1, recs
    assert warned[0]["level"] == "WARNING"
    assert warned[0]["msg"] == "old_api is deprecated\nuse new_api"  # the text only, not the source line
    assert warned[0]["category"] == "FutureWarning"
    assert warned[0]["location"] == f"{__file__}:{line}"


def test_transformers_records_reach_our_handler_once_and_its_bars_are_off(restore_logging, capsys):
    from huggingface_hub.utils import are_progress_bars_disabled
    from transformers.utils import logging as tf_logging

    setup_logging("INFO", "json")
    lib = logging.getLogger("transformers")
    assert lib.propagate and tf_logging._default_handler not in lib.handlers
    assert not tf_logging.is_progress_bar_enabled() and are_progress_bars_disabled()
    tf_logging.get_logger("transformers.modeling_utils").warning("weights not tied")
    recs = json_lines(capsys.readouterr().err)
    assert [r["msg"] for r in recs if r["logger"] == "transformers.modeling_utils"] == ["weights not tied"]


def test_text_mode_after_json_puts_the_libraries_back(restore_logging):
    from transformers.utils import logging as tf_logging

    lib = logging.getLogger("transformers")
    before = (lib.propagate, tf_logging._default_handler in lib.handlers, tf_logging.is_progress_bar_enabled())
    setup_logging("INFO", "json")
    setup_logging("INFO", "text")
    assert (lib.propagate, tf_logging._default_handler in lib.handlers, tf_logging.is_progress_bar_enabled()) == before


def test_an_exception_record_is_one_line(restore_logging, capsys):
    setup_logging("INFO", "json")
    try:
        raise ValueError("bad\nvalue")
    except ValueError:
        logging.getLogger("node.test").exception("it failed")
    (rec,) = json_lines(capsys.readouterr().err)
    assert rec["msg"] == "it failed" and "ValueError: bad\nvalue" in rec["exc"] and "Traceback" in rec["exc"]


# hivemind is checked in child processes: importing it here could clash with py-libp2p in other tests.
_HIVEMIND_SCRIPT = textwrap.dedent("""
    import logging, sys
    from swarm_node.node.observe.logs import setup_logging
    if sys.argv[1] == "before":  # setup_logging adopts what is already imported
        import hivemind.utils.logging
        setup_logging("INFO", "json")
    else:
        setup_logging("INFO", "json")
        assert "hivemind" not in sys.modules  # setup_logging never imports it
        import hivemind.utils.logging
        from swarm_node.node.observe.logs import adopt_library_logging
        adopt_library_logging()  # what the module importing hivemind does
    hivemind.utils.logging.get_logger("hivemind.p2p.p2p_daemon").info("Peer ID: Qm123", extra={"caller": "p2pd"})
    # The daemon's listener closing under a stop: not shown (at hivemind's INFO level).
    hivemind.utils.logging.get_logger("hivemind.p2p.p2p_daemon").error(
        "failed to accept: accept tcp 127.0.0.1:4001: use of closed network connection", extra={"caller": "p2pd"})
    hivemind.utils.logging.get_logger("hivemind.dht").debug("below hivemind's INFO: not shown")
    hivemind.utils.logging.get_logger("hivemind.dht").warning("slow peer")
""")


@pytest.mark.parametrize("imported", ["before", "after"])
@pytest.mark.subprocess
def test_hivemind_records_go_through_the_json_handler(imported):
    env = {**os.environ, "PYTHONWARNINGS": "ignore::DeprecationWarning"}
    env.pop("HIVEMIND_LOGLEVEL", None)
    r = subprocess.run([sys.executable, "-c", _HIVEMIND_SCRIPT, imported], capture_output=True, text=True,
                       env=env, cwd=REPO_ROOT, timeout=120)
    assert r.returncode == 0, r.stderr
    recs = [x for x in json_lines(r.stderr) if x["logger"].startswith("hivemind")]
    assert [(x["logger"], x["level"], x["msg"]) for x in recs] == [
        ("hivemind.p2p.p2p_daemon", "INFO", "Peer ID: Qm123"),
        ("hivemind.dht", "WARNING", "slow peer"),  # not hivemind's "WARN"
    ]
    assert recs[0]["caller"] == "p2pd"


@pytest.mark.subprocess
def test_lora_training_run_logs_only_json_and_no_peft_deprecation(tiny_model_dir, tmp_path):
    r = subprocess.run([sys.executable, "-m", "swarm_node.node.cli", "train", "--model.name", str(tiny_model_dir),
                        "--model.lora_rank", "4", "--train.steps", "2", "--run.dir", str(tmp_path / "run"),
                        "--run.log_format", "json", "--run.progress", "plain", "--run.plot", "false"],
                       capture_output=True, text=True, env=_env(), cwd=REPO_ROOT, timeout=300)
    assert r.returncode == 0, r.stderr[-4000:]
    recs = json_lines(r.stderr)
    warned = [x for x in recs if x["logger"] == "py.warnings"]
    # Every warning a record of one line (a warning's own record: the test above); the
    # gradient-checkpointing FutureWarning peft raised through transformers on every LoRA start is
    # filtered by name (policies/policy.py), so it is not among them.
    assert all("\n" not in x["msg"] for x in warned), warned
    assert not any(x["category"] == "FutureWarning" and "modeling_utils.py:" in x["location"] for x in warned), warned
    assert any(x["logger"] == "swarm_node.node.observe.progress" for x in recs)
    assert json.loads(r.stdout)["steps"] == 2


@pytest.mark.slow
@pytest.mark.subprocess
def test_a_hivemind_join_logs_only_json_including_hivemind_and_p2pd(tiny_model_dir, tmp_path):
    procs = Procs(tmp_path)
    try:
        _, maddr = procs.bootstrap(timeout=90)  # polls for its multiaddr file, with a deadline
        env = {**_env(), "HIVEMIND_LOGLEVEL": "DEBUG"}  # hivemind re-logs the p2p daemon's output at DEBUG
        err, out = tmp_path / "join.err", tmp_path / "join.out"
        with err.open("wb") as e, out.open("wb") as o:
            join = subprocess.Popen(
                [sys.executable, "-m", "swarm_node.node.cli", "join", "--bootstrap", maddr, *LOOPBACK_FLAGS,
                 "--model.name", str(tiny_model_dir), "--train.steps", "2", "--swarm.round_seconds", "1",
                 "--run.dir", str(tmp_path / "join"), "--run.log_format", "json", "--run.progress", "plain",
                 "--run.plot", "false", "--swarm.external_groups", "0", "--generation.prompts_per_step", "2"],
                stdout=o, stderr=e, env=env, cwd=REPO_ROOT)
        procs.procs.append(join)  # closed with the bootstrap whatever happens
        rc = join.wait(timeout=300)
        assert rc == 0, err.read_text()[-4000:]
        recs = json_lines(err.read_text())
        hivemind = [x for x in recs if x["logger"].startswith("hivemind")]
        assert hivemind, "no record from a hivemind logger"
        assert any(x.get("caller") == "p2pd" for x in hivemind), "no re-logged p2p daemon line"
        assert any(x["logger"] == "swarm_node.node.observe.progress" for x in recs)
        assert json.loads(out.read_text())["steps"] == 2
    finally:
        procs.close()
