"""CLI flag handling: a misspelt or abbreviated flag is an error naming the key, never a silent
match of a longer flag (argparse's prefix matching is off)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from swarm_node.node.cli import main
from tests.helpers.paths import ROOT


@pytest.mark.parametrize("argv, needle", [
    (["train", "--learner.learning_rat", "1e-4"], "learner.learning_rat: unknown key"),
    (["train", "--learner.learning_rat=1e-4"], "learner.learning_rat: unknown key"),
    (["train", "--nosuch.key", "1"], "nosuch"),
    (["train", "--bogus"], "unrecognized argument '--bogus'"),
    (["train", "--learner.baseline", "avg"], "learner.baseline"),
])
def test_bad_flags_fail_naming_the_key(argv, needle, capsys):
    assert main(argv) == 2
    assert needle in capsys.readouterr().err


def test_flag_with_equals_and_print_config(capsys):
    assert main(["train", "--learner.learning_rate=1e-3", "--tasks.difficulties", "[1, 3]", "--print-config"]) == 0
    out = capsys.readouterr().out
    assert '"learning_rate": 0.001' in out and '"difficulties": [\n      1,\n      3\n    ]' in out


def test_string_settings_take_numeric_looking_values_verbatim(capsys):
    assert main(["train", "--run.dir", "2024", "--model.name", "123", "--print-config"]) == 0
    out = capsys.readouterr().out
    assert '"dir": "2024"' in out and '"name": "123"' in out


def test_resume_shorthand_sets_run_resume(capsys):
    assert main(["train", "--resume", "--print-config"]) == 0
    assert '"resume": true' in capsys.readouterr().out


@pytest.mark.parametrize("flag, value", [("learner.delta", "0"), ("learner.epsilon_high", "-0.1"),
                                         ("learner.m2po_tau", "-1")])
def test_trust_region_bounds_are_checked_at_start(flag, value, capsys):
    assert main(["train", f"--{flag}", value]) == 2
    err = capsys.readouterr().err
    assert flag in err and err.count("+ flags") == 1


def test_join_sets_the_hivemind_transport_and_bootstrap_peers(capsys):
    m = "/ip4/10.0.0.1/tcp/31337/p2p/QmWyMywt33NGEr2d32nqvpPeQq36fd3tj9eZaiBj2CbKSM"
    assert main(["join", "--bootstrap", m, "--print-config"]) == 0
    cfg = json.loads(capsys.readouterr().out)
    assert cfg["swarm"]["transport"] == "hivemind" and cfg["swarm"]["initial_peers"] == [m]


def test_join_rejects_a_bootstrap_address_without_peer_id(capsys):
    assert main(["join", "--bootstrap", "/ip4/10.0.0.1/tcp/31337", "--print-config"]) == 2
    assert "/p2p/<peer id>" in capsys.readouterr().err


def test_join_rejects_a_placeholder_peer_id_or_a_malformed_address_at_start_naming_it(capsys):
    """The docs' own placeholder (/p2p/QmWyMy) passed the check, then a join retried it and blamed
    a slow machine; doctor said the bootstrap answered. Now: exit 2, the address and why."""
    for addr, why in (("/ip4/10.0.0.1/tcp/31337/p2p/QmWyMy", "QmWyMy is not a libp2p peer id"),
                      ("/ip4/10.0.0.400/tcp/31337/p2p/QmWyMywt33NGEr2d32nqvpPeQq36fd3tj9eZaiBj2CbKSM",
                       "not a valid multiaddr: base address '10.0.0.400' is not IPv4")):
        assert main(["join", "--bootstrap", addr, "--print-config"]) == 2
        err = capsys.readouterr().err
        assert f"{addr}: {why}" in err, err[-2000:]


@pytest.mark.subprocess  # hivemind is imported in a child: here it could clash with py-libp2p
def test_bootstrap_addresses_are_checked_without_the_libp2p_extras_multiaddr_too():
    """``multiaddr`` comes with the libp2p extra only; a plain install parses with hivemind's copy."""
    code = ("import sys; sys.modules['multiaddr'] = None\n"
            "from swarm_node.node.transport.addresses import peer_address_error as e\n"
            "print(e('/ip4/10.0.0.1/tcp/31337/p2p/QmWyMy'))\n"
            "print(e('/ip4/10.0.0.400/tcp/31337/p2p/QmWyMywt33NGEr2d32nqvpPeQq36fd3tj9eZaiBj2CbKSM'))\n"
            "print(e('/ip4/10.0.0.1/tcp/31337/p2p/QmWyMywt33NGEr2d32nqvpPeQq36fd3tj9eZaiBj2CbKSM'))\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    lines = done.stdout.splitlines()
    assert lines[0] == "QmWyMy is not a libp2p peer id (the form `swarm-node bootstrap` prints)"
    assert "base address '10.0.0.400' is not IPv4" in lines[1] and lines[2] == "None"


def test_help_explains_joining(capsys):
    with pytest.raises(SystemExit):
        main(["join", "--help"])
    out = capsys.readouterr().out
    assert "--bootstrap MADDR" in out and "--swarm.external_groups" in out and "SAPO" in out
    with pytest.raises(SystemExit):
        main(["bootstrap", "--help"])
    assert "--maddr-file" in capsys.readouterr().out


@pytest.mark.daemon  # it starts p2pd (tests/helpers/process_guard.py)
def test_join_with_no_reachable_bootstrap_exits_with_a_clear_message(tiny_model_dir, tmp_path, capsys):
    # A syntactically valid address where nothing listens: the node retries, then says what to check.
    dead = "/ip4/127.0.0.1/tcp/9/p2p/QmWyMywt33NGEr2d32nqvpPeQq36fd3tj9eZaiBj2CbKSM"
    rc = main(["join", "--bootstrap", dead, "--model.name", str(tiny_model_dir), "--run.dir", str(tmp_path / "r"),
               "--swarm.host_maddrs", '["/ip4/127.0.0.1/tcp/0"]', "--swarm.use_relay", "false",
               "--swarm.nat_port_map", "false", "--swarm.join_retries", "1", "--swarm.join_backoff", "0.1"])
    assert rc == 1
    err = capsys.readouterr().err
    assert "could not join the swarm after 2 attempts" in err and "no bootstrap peer answered" in err
    # The failed start created the run folder, so it takes it away again: no config.json, no
    # identity of a node that never joined, no status.json of a node that never ran.
    assert not (tmp_path / "r").exists()


def test_join_without_a_bootstrap_is_an_explicit_choice(tmp_path, capsys):
    assert main(["join", "--print-config"]) == 2
    err = capsys.readouterr().err
    assert "join needs a swarm to join: pass --bootstrap MADDR" in err and "--new-swarm" in err
    assert main(["join", "--new-swarm", "--print-config"]) == 0
    cfg = json.loads(capsys.readouterr().out)
    assert cfg["swarm"]["initial_peers"] == [] and cfg["run"]["dir"] == "runs/join"  # not train's runs/solo


def test_join_keeps_a_run_dir_given_by_flag_or_config(tmp_path, capsys):
    dead = "/ip4/127.0.0.1/tcp/9/p2p/QmWyMywt33NGEr2d32nqvpPeQq36fd3tj9eZaiBj2CbKSM"
    assert main(["join", "--bootstrap", dead, "--run.dir", "runs/me", "--print-config"]) == 0
    assert json.loads(capsys.readouterr().out)["run"]["dir"] == "runs/me"
    cfg_file = tmp_path / "c.toml"
    cfg_file.write_text('[run]\ndir = "runs/from-file"\n')
    assert main(["join", "--bootstrap", dead, "--config", str(cfg_file), "--print-config"]) == 0
    assert json.loads(capsys.readouterr().out)["run"]["dir"] == "runs/from-file"
    assert main(["train", "--print-config"]) == 0
    assert json.loads(capsys.readouterr().out)["run"]["dir"] == "runs/solo"


def test_join_over_mqtt_takes_the_broker_and_never_a_password_in_it(tmp_path, capsys):
    assert main(["join", "--broker", "mqtts://sn1user@broker.lan:8883", "--print-config"]) == 0
    cfg = json.loads(capsys.readouterr().out)
    assert cfg["swarm"]["transport"] == "mqtt" and cfg["swarm"]["broker"] == "mqtts://sn1user@broker.lan:8883"
    assert main(["join", "--broker", "mqtts://u:hunter2@broker.lan", "--print-config"]) == 2
    err = capsys.readouterr().err
    assert "no password in it" in err and "hunter2" not in err
    assert main(["join", "--transport", "mqtt", "--print-config"]) == 2
    assert "needs swarm.broker" in capsys.readouterr().err
    m = "/ip4/10.0.0.1/tcp/31337/p2p/QmWyMywt33NGEr2d32nqvpPeQq36fd3tj9eZaiBj2CbKSM"
    assert main(["join", "--broker", "mqtt://h", "--bootstrap", m, "--print-config"]) == 2
    assert "every node meets at the broker" in capsys.readouterr().err


def test_join_over_mqtt_with_no_broker_listening_exits_with_a_clear_message(tiny_model_dir, tmp_path, capsys):
    rc = main(["join", "--broker", "mqtt://127.0.0.1:9", "--model.name", str(tiny_model_dir),
               "--run.dir", str(tmp_path / "r"), "--swarm.join_retries", "1", "--swarm.join_backoff", "0.1"])
    assert rc == 1
    assert "cannot reach the broker at mqtt://127.0.0.1:9" in capsys.readouterr().err
    assert not (tmp_path / "r").exists()


def test_id_prints_the_peer_id_join_will_use(tmp_path, capsys):
    assert main(["id", "--run-dir", str(tmp_path / "me")]) == 0
    first = capsys.readouterr().out.strip()
    assert main(["id", "--run-dir", str(tmp_path / "me")]) == 0
    assert capsys.readouterr().out.strip() == first and first.startswith("sn1")
    assert (tmp_path / "me" / "identity.pem").stat().st_mode & 0o777 == 0o600


@pytest.mark.parametrize("transport_flags, bootstrap, needed", [
    ([], "/ip4/127.0.0.1/tcp/4001/p2p/12D3KooWM8aByEo7zCu8VenXkDgs5Z52C5UefjziKWKtSoo8i524", "libp2p"),
    (["--transport", "libp2p"], "/ip4/127.0.0.1/tcp/4001/p2p/QmWyMywt33NGEr2d32nqvpPeQq36fd3tj9eZaiBj2CbKSM", "hivemind"),
])
def test_join_names_the_transport_another_carriers_bootstrap_needs_at_once(transport_flags, bootstrap, needed, capsys):
    # Over hivemind a libp2p bootstrap was retried for over a minute, then "no bootstrap peer answered".
    assert main(["join", *transport_flags, "--bootstrap", bootstrap, "--print-config"]) == 2
    err = capsys.readouterr().err
    assert f"is a {needed} peer" in err and f"pass --transport {needed}" in err


@pytest.mark.parametrize("flags, named", [(["--follow", "sn1typo"], "--follow 'sn1typo'"),
                                          (["--broadcast.follow", "sn1typo"], "--broadcast.follow 'sn1typo'")])
def test_join_says_a_follow_that_is_no_node_id_is_not_one(flags, named, capsys):
    assert main(["join", "--role", "worker", *flags, "--new-swarm", "--print-config"]) == 2
    err = capsys.readouterr().err
    assert f"{named} is not a node id" in err and "sn1 followed by 32 characters" in err
    assert "needs broadcast.follow" not in err  # not "missing": it was given, and is wrong


def test_a_usage_error_is_one_line_that_says_where_the_help_is(capsys):
    """A missing value printed train's whole usage (66 lines of flags) above the error."""
    with pytest.raises(SystemExit) as e:
        main(["train", "--model.name"])
    assert e.value.code == 2
    err = capsys.readouterr().err
    assert err == "swarm-node train: error: argument --model.name: expected one argument (see swarm-node train --help)\n"
    with pytest.raises(SystemExit):
        main(["eval"])
    assert capsys.readouterr().err.splitlines() == [
        "swarm-node eval: error: the following arguments are required: RUN (see swarm-node eval --help)"]
