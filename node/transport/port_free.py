"""Whether a TCP port can still be listened on, checked before a bootstrap peer starts.

hivemind's p2p daemon binds with SO_REUSEPORT, so a second bootstrap on a port already in use
started anyway, said "bootstrap peer is up" with another peer id, and two peers shared the address
(connections went to either). A plain bind (SO_REUSEADDR only, which passes over a closed socket's
TIME_WAIT but not over a listener) tells a port in use before anything starts.
"""

from __future__ import annotations

import errno
import socket

from swarm_node.node.errors import ConfigError

__all__ = ["check_port_free"]


def check_port_free(host: str, port: int) -> None:
    """Raise ``ConfigError`` when something listens on ``host:port`` (port 0: any free port, fine)."""
    if not port:
        return
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((host, port))
        except OSError as e:
            if e.errno == errno.EADDRINUSE:
                raise ConfigError(f"port {port} on {host} is in use (another bootstrap peer, or another program, "
                                  f"listens there): choose another --port, or stop what holds it") from None
            raise ConfigError(f"cannot listen on {host}:{port}: {e.strerror or e}; choose another --host or "
                              f"--port") from None
