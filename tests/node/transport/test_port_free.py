"""A bootstrap peer refuses a port something already listens on, before any daemon starts (a
second hivemind daemon would bind over it with SO_REUSEPORT and say it is up)."""

from __future__ import annotations

import socket

import pytest

from swarm_node.node.cli import main
from swarm_node.node.errors import ConfigError
from swarm_node.node.transport.port_free import check_port_free


def _listener() -> tuple[socket.socket, int]:
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)  # as p2pd binds: a second daemon could join it
    s.bind(("127.0.0.1", 0))
    s.listen()
    return s, s.getsockname()[1]


def test_a_port_in_use_is_refused_and_a_free_one_is_not():
    s, port = _listener()
    with s:
        with pytest.raises(ConfigError, match=f"port {port} on 127.0.0.1 is in use"):
            check_port_free("127.0.0.1", port)
    check_port_free("127.0.0.1", port)  # closed: free again (TIME_WAIT does not count)
    check_port_free("127.0.0.1", 0)  # any free port


def test_bootstrap_on_a_port_in_use_stops_with_the_reason(capsys):
    s, port = _listener()
    with s:
        assert main(["bootstrap", "--host", "127.0.0.1", "--port", str(port)]) == 2
    err = capsys.readouterr().err
    assert f"port {port} on 127.0.0.1 is in use" in err and "choose another --port" in err
