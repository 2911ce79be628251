"""A local Mosquitto broker, started with a generated configuration (simulation, tests, benchmarks).

A private cluster runs its own broker (docs/private-cluster.md); this module is for a broker on
one machine: ``swarm-node sim --transport mqtt`` starts one, and the tests start one per module
with up to three loopback listeners, as an operator would configure them:

- ``anonymous``: no login (the simulator's);
- ``password``: logins from a password file (hashed by ``mosquitto_passwd``) and an ACL file;
- ``tls``: the same logins over TLS with a certificate the caller provides (and, with
  ``require_client_cert``, a client certificate signed by the same CA).

Mosquitto does not start by itself on a Debian machine without systemd; ``Mosquitto.start``
launches ``mosquitto -c <conf>``, waits until every listener accepts a connection, and ``stop``
ends it (``restart`` keeps the same ports, so clients can find it again).
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

from swarm_node.node.errors import ConfigError

__all__ = ["Mosquitto", "BrokerMissing", "free_port", "node_acl", "mosquitto_binary"]

INSTALL_HINT = ("Mosquitto is not installed: `apt-get install -y mosquitto` (Debian/Ubuntu; `make test` "
                "does it), or `brew install mosquitto`")


class BrokerMissing(ConfigError):
    """No mosquitto executable on this machine."""


def mosquitto_binary() -> str:
    """The mosquitto executable (Debian puts it in /usr/sbin, often not on a user's PATH)."""
    found = shutil.which("mosquitto") or next((p for p in ("/usr/sbin/mosquitto", "/usr/local/sbin/mosquitto",
                                                           "/opt/homebrew/sbin/mosquitto") if Path(p).exists()), None)
    if found is None:
        raise BrokerMissing(INSTALL_HINT)
    return found


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def node_acl(prefix: str = "swarm-node") -> str:
    """The ACL docs/private-cluster.md recommends, for accounts named by their node's peer id:
    each reads the swarm's shared topics and only its own inbox and probe, and writes only topics
    that name it as the writer (its rollouts, heartbeat, pointer and follower records, and requests
    and replies into another node's inbox with itself as the sender)."""
    read = "".join(f"pattern read {prefix}/+/{family}/#\n" for family in ("rollouts", "peers", "weights", "follows"))
    # Writes at the exact depth of each topic family: an account cannot leave retained messages
    # in topics no node reads but every subscriber of a wildcard would get.
    return (read + f"pattern read {prefix}/+/probe/%u\n"
            f"pattern read {prefix}/+/to/%u/#\n"
            f"pattern write {prefix}/+/rollouts/%u/+/+\n"
            f"pattern write {prefix}/+/peers/%u\n"
            f"pattern write {prefix}/+/probe/%u\n"
            f"pattern write {prefix}/+/weights/%u\n"
            f"pattern write {prefix}/+/weights/%u/manifest/+\n"
            f"pattern write {prefix}/+/follows/%u/+\n"
            f"pattern write {prefix}/+/to/+/%u/+\n")


@dataclass
class Mosquitto:
    dir: Path
    anonymous: bool = True
    users: dict[str, str] = field(default_factory=dict)  # user -> password (password and tls listeners)
    acl: str | None = None  # ACL file text for the logged-in listeners (None: everything allowed)
    tls: tuple[str, str, str] | None = None  # (ca, server cert, server key) files
    require_client_cert: bool = False
    max_packet_size: int = 0  # 0: Mosquitto's default (256 MiB)
    ports: dict[str, int] = field(default_factory=dict)
    preexec_fn: object = None  # run in the child before exec (the simulator: die with the parent)
    proc: subprocess.Popen | None = field(default=None, init=False)

    def __post_init__(self):
        self.dir = Path(self.dir)
        self.binary = mosquitto_binary()
        for kind, wanted in (("anonymous", self.anonymous), ("password", bool(self.users)),
                             ("tls", self.tls is not None)):
            if wanted and kind not in self.ports:
                self.ports[kind] = free_port()

    def url(self, kind: str = "anonymous", user: str | None = None) -> str:
        scheme = "mqtts" if kind == "tls" else "mqtt"
        host = "localhost" if kind == "tls" else "127.0.0.1"  # the test certificate names both
        return f"{scheme}://{user + '@' if user else ''}{host}:{self.ports[kind]}"

    def _write_config(self) -> Path:
        self.dir.mkdir(parents=True, exist_ok=True)
        lines = ["per_listener_settings true", "persistence false", f"log_dest file {self.dir / 'mosquitto.log'}",
                 "log_type error", "log_type warning", "log_type notice", "log_type information",
                 "connection_messages true"]
        if os.geteuid() == 0:
            lines.append("user root")  # as root it would switch to `mosquitto`, who cannot read our files
        if self.max_packet_size:
            lines.append(f"max_packet_size {self.max_packet_size}")
        passwd = self.dir / "passwd"
        if self.users:
            passwd.write_text("")
            for user, password in self.users.items():
                subprocess.run(["mosquitto_passwd", "-b", str(passwd), user, password], check=True,
                               capture_output=True)
        acl = self.dir / "acl"
        if self.acl is not None:
            acl.write_text(self.acl)
        if self.anonymous:
            lines += [f"listener {self.ports['anonymous']} 127.0.0.1", "allow_anonymous true"]
        for kind in ("password", "tls"):
            if kind not in self.ports:
                continue
            lines += [f"listener {self.ports[kind]} 127.0.0.1", "allow_anonymous false", f"password_file {passwd}",
                      "use_username_as_clientid true"]  # nobody takes over another's session by its id
            if self.acl is not None:
                lines.append(f"acl_file {acl}")
            if kind == "tls":
                ca, cert, key = self.tls
                lines += [f"cafile {ca}", f"certfile {cert}", f"keyfile {key}",
                          f"require_certificate {'true' if self.require_client_cert else 'false'}"]
        conf = self.dir / "mosquitto.conf"
        conf.write_text("\n".join(lines) + "\n")
        return conf

    def start(self, timeout: float = 15.0) -> "Mosquitto":
        conf = self._write_config()
        out = open(self.dir / "mosquitto.stdout", "ab")
        self.proc = subprocess.Popen([self.binary, "-c", str(conf)], stdout=out, stderr=subprocess.STDOUT,
                                     stdin=subprocess.DEVNULL, start_new_session=True, preexec_fn=self.preexec_fn)
        out.close()
        deadline = time.monotonic() + timeout
        waiting = set(self.ports.values())
        while waiting:
            if self.proc.poll() is not None:
                raise RuntimeError(f"mosquitto exited with {self.proc.returncode}: {self.log_tail()}")
            for port in list(waiting):
                try:
                    socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
                    waiting.discard(port)
                except OSError:
                    pass
            if waiting and time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"mosquitto did not listen on {sorted(waiting)} within {timeout:g} s: "
                                   f"{self.log_tail()}")
            if waiting:
                time.sleep(0.05)
        return self

    def log_tail(self, n: int = 20) -> str:
        text = ""
        for name in ("mosquitto.log", "mosquitto.stdout"):
            p = self.dir / name
            if p.exists():
                text += "\n".join(p.read_text(errors="replace").splitlines()[-n:]) + "\n"
        return text.strip()

    def stop(self, kill: bool = False) -> None:
        if self.proc is None:
            return
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL if kill else signal.SIGTERM)
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.proc = None

    def restart(self, kill: bool = True) -> None:
        """Stop (SIGKILL by default: a crash, not a shutdown) and start again on the same ports."""
        self.stop(kill=kill)
        self.start()

    def __enter__(self) -> "Mosquitto":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()
