"""Where the broker is and how to log in: ``mqtt[s]://[user@]host[:port]``, a password kept out of sight.

A node's broker is one URL (``swarm.broker``, ``join --broker``). The password is never part of
it: a URL on a command line shows in the process list and the shell history, and the config is
written to <run.dir>/config.json. It is read from ``swarm.broker_password_file`` (its first line)
or ``$SWARM_NODE_MQTT_PASSWORD``, and ``BrokerSettings`` keeps it out of its repr.
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlsplit

from swarm_node.node.transport.base import TransportError

log = logging.getLogger(__name__)

__all__ = ["BrokerSettings", "parse_broker_url", "resolve_password", "PASSWORD_ENV"]

PASSWORD_ENV = "SWARM_NODE_MQTT_PASSWORD"


@dataclass(frozen=True)
class BrokerSettings:
    host: str
    port: int
    tls: bool
    username: str | None = None
    password: str | None = field(default=None, repr=False)
    ca_file: str = ""  # empty: the system's CAs (mqtts)
    cert_file: str = ""  # client certificate (optional)
    key_file: str = ""
    keepalive: int = 20

    @property
    def url(self) -> str:
        """The broker as the operator wrote it, without any secret."""
        user = f"{self.username}@" if self.username else ""
        return f"{'mqtts' if self.tls else 'mqtt'}://{user}{self.host}:{self.port}"


def parse_broker_url(url: str, **extra) -> BrokerSettings:
    """``mqtt://[user@]host[:1883]`` or ``mqtts://[user@]host[:8883]`` (TLS)."""
    parts = urlsplit(url)
    if parts.scheme not in ("mqtt", "mqtts"):
        raise ValueError(f"broker {url!r}: use mqtt://[user@]host[:port] or mqtts://[user@]host[:port] (TLS)")
    if parts.password is not None:
        raise ValueError("broker URL: put no password in it (it would show in the process list, the shell "
                         f"history and config.json); use --swarm.broker_password_file or ${PASSWORD_ENV}")
    if not parts.hostname:
        raise ValueError(f"broker {url!r}: no host")
    if parts.path not in ("", "/") or parts.query or parts.fragment:
        raise ValueError(f"broker {url!r}: only scheme, user, host and port")
    try:
        port = parts.port or (8883 if parts.scheme == "mqtts" else 1883)
    except ValueError as e:
        raise ValueError(f"broker {url!r}: {e}") from None
    return BrokerSettings(host=parts.hostname, port=port, tls=parts.scheme == "mqtts",
                          username=parts.username or None, **extra)


def resolve_password(password_file: str = "", env: dict | None = None) -> str | None:
    """The broker password: the file's first line if a file is given, else $SWARM_NODE_MQTT_PASSWORD,
    else None (no password)."""
    env = os.environ if env is None else env
    if password_file:
        p = Path(password_file).expanduser()
        try:
            text = p.read_text()
            mode = p.stat().st_mode
        except OSError as e:
            raise TransportError(f"broker password file {p}: {e.strerror or e}") from None
        if mode & 0o077:
            log.warning("broker password file %s can be read by other users (mode %o): chmod 600 it", p, mode & 0o777)
        return text.splitlines()[0] if text else ""
    return env.get(PASSWORD_ENV) or None
