"""A small internet in network namespaces, for the NAT tests: a "public" namespace and two homes,
each behind its own masquerading router, on virtual links only (veth pairs; nothing touches the
machine's own interfaces or its loopback).

    home1 (192.168.1.2) ── router1 (NAT) ──┐                 ┌── router2 (NAT) ── home2 (192.168.2.2)
                          wan 10.99.1.2    └─ public ────────┘    wan 10.99.2.2
                                              10.99.0.1 (on its lo; it forwards between the routers)

Each router masquerades what leaves its WAN and forwards into its LAN only what belongs to a
connection the LAN opened (nftables' conntrack), as a home router does; the public namespace has no
route to either home. A home reaches the public address and the other router's WAN, never the
other home. Namespaces are named ``snnat-<pid>-<role>``: ``clean_leftovers`` removes those of a
test process that no longer runs (killed before its finalizer), and ``close`` kills every process
inside this net's namespaces (p2pd daemons included) before deleting them.

Needs root, ``ip netns`` and ``nft`` (``make test`` installs Debian's nftables); ``unavailable``
says why a machine cannot run them.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

from tests.helpers.procs import stop_all

PREFIX = "snnat-"
PUBLIC_IP = "10.99.0.1"
ROUTER_WAN = {1: "10.99.1.2", 2: "10.99.2.2"}
HOME_IP = {1: "192.168.1.2", 2: "192.168.2.2"}
NFT_HINT = "nft is not installed: `make nftables` (Debian's nftables, which `make test` installs)"


def _ip(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    return subprocess.run(["ip", *args], capture_output=True, text=True, check=check)


def nft_binary() -> str | None:
    return shutil.which("nft") or next((p for p in ("/usr/sbin/nft", "/sbin/nft") if Path(p).exists()), None)


def unavailable() -> str | None:
    """Why this machine cannot build the net (a reason to skip), or None."""
    if os.geteuid() != 0:
        return "the NAT tests build network namespaces: they need root"
    if shutil.which("ip") is None:
        return "the NAT tests need iproute2's `ip netns`"
    probe = f"{PREFIX}probe-{os.getpid()}"
    made = _ip("netns", "add", probe, check=False)
    if made.returncode != 0:
        return f"network namespaces are unavailable here: {made.stderr.strip()}"
    _ip("netns", "del", probe, check=False)
    return None


def _namespaces() -> list[str]:
    out = _ip("netns", "list", check=False).stdout
    return [line.split()[0] for line in out.splitlines() if line.strip()]


def _kill_inside(ns: str) -> None:
    """SIGKILL every process in ``ns`` (a node's p2pd too, whoever its parent was)."""
    for pid in _ip("netns", "pids", ns, check=False).stdout.split():
        try:
            os.kill(int(pid), signal.SIGKILL)
        except (ProcessLookupError, ValueError):
            pass


def _remove(ns: str) -> None:
    _kill_inside(ns)
    _ip("netns", "del", ns, check=False)  # its veths go with it


def clean_leftovers() -> list[str]:
    """Remove the namespaces of NAT tests whose process is gone (a run killed mid-test)."""
    removed = []
    for ns in _namespaces():
        if not ns.startswith(PREFIX):
            continue
        owner = ns[len(PREFIX):].split("-")[0]
        if owner.isdigit() and int(owner) != os.getpid() and Path(f"/proc/{owner}").exists():
            continue  # another test process's net, still in use
        if owner.isdigit() and int(owner) == os.getpid():
            continue  # ours: close() removes it
        _remove(ns)
        removed.append(ns)
    return removed


class NatNet:
    """The namespaces, links and rules above; ``spawn`` runs a command inside one of them."""

    def __init__(self, tag: str = "0"):
        self.names = {role: f"{PREFIX}{os.getpid()}-{tag}-{role}" for role in ("pub", "r1", "r2", "h1", "h2")}
        self.procs: list[subprocess.Popen] = []

    def ns(self, role: str) -> str:
        return self.names[role]

    def exec(self, role: str, *argv: str, check: bool = True) -> subprocess.CompletedProcess:
        return subprocess.run(["ip", "netns", "exec", self.ns(role), *argv], capture_output=True, text=True,
                              check=check)

    def build(self) -> "NatNet":
        nft = nft_binary()
        if nft is None:
            raise RuntimeError(NFT_HINT)
        try:
            for name in self.names.values():
                _ip("netns", "add", name)
            for role in self.names:
                self.exec(role, "ip", "link", "set", "lo", "up")
            pub = self.ns("pub")
            self.exec("pub", "ip", "addr", "add", f"{PUBLIC_IP}/32", "dev", "lo")
            self._forwarding("pub")
            for i in (1, 2):
                r, h = self.ns(f"r{i}"), self.ns(f"h{i}")
                # router i's WAN faces the public namespace; its LAN faces home i.
                _ip("link", "add", "wan", "netns", r, "type", "veth", "peer", "name", f"to-r{i}", "netns", pub)
                _ip("link", "add", "lan", "netns", r, "type", "veth", "peer", "name", "eth0", "netns", h)
                self._addr("pub", f"to-r{i}", f"10.99.{i}.1/24")
                self._addr(f"r{i}", "wan", f"{ROUTER_WAN[i]}/24")
                self._addr(f"r{i}", "lan", f"192.168.{i}.1/24")
                self._addr(f"h{i}", "eth0", f"{HOME_IP[i]}/24")
                self.exec(f"r{i}", "ip", "route", "add", "default", "via", f"10.99.{i}.1")
                self.exec(f"h{i}", "ip", "route", "add", "default", "via", f"192.168.{i}.1")
                self._forwarding(f"r{i}")
                self._nat(f"r{i}", nft)
        except BaseException:
            self.close()
            raise
        return self

    def _addr(self, role: str, dev: str, cidr: str) -> None:
        self.exec(role, "ip", "addr", "add", cidr, "dev", dev)
        self.exec(role, "ip", "link", "set", dev, "up")

    def _forwarding(self, role: str) -> None:
        self.exec(role, "sh", "-c", "echo 1 > /proc/sys/net/ipv4/ip_forward")

    def _nat(self, role: str, nft: str) -> None:
        # A home router: the LAN's connections leave masqueraded as the WAN address; from the WAN,
        # only replies (and related ICMP) come in; nothing else is forwarded.
        rules = """
table ip nat {
  chain postrouting { type nat hook postrouting priority srcnat; oifname "wan" masquerade; }
}
table ip filter {
  chain forward {
    type filter hook forward priority filter; policy drop;
    ct state established,related accept
    iifname "lan" oifname "wan" accept
  }
}
"""
        subprocess.run(["ip", "netns", "exec", self.ns(role), nft, "-f", "-"], input=rules, text=True,
                       capture_output=True, check=True)

    def spawn(self, role: str, argv: list[str], log: Path, env: dict | None = None,
              cwd: Path | None = None) -> subprocess.Popen:
        """Start ``argv`` inside ``role``'s namespace (``ip netns exec`` execs it: the pid is the
        command's own), output to ``log``."""
        with log.open("ab") as f:
            p = subprocess.Popen(["ip", "netns", "exec", self.ns(role), *argv], stdout=f, stderr=subprocess.STDOUT,
                                 env=env, cwd=cwd)
        self.procs.append(p)
        return p

    def python(self, role: str, args: list[str], log: Path, cwd: Path) -> subprocess.Popen:
        env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONUNBUFFERED="1")
        return self.spawn(role, [sys.executable, *args], log, env=env, cwd=cwd)

    def connects(self, src: str, dst: str, ip: str, port: int = 5599) -> str | None:
        """Whether a TCP connection from ``src`` reaches a listener in ``dst`` at ``ip``: the
        address the listener saw it come from, or None."""
        listen = ("import socket,sys;s=socket.socket();s.setsockopt(socket.SOL_SOCKET,socket.SO_REUSEADDR,1);"
                  f"s.bind(('0.0.0.0',{port}));s.listen();print('up',flush=True);s.settimeout(5);"
                  "c,a=s.accept();print(a[0],flush=True)")
        server = subprocess.Popen(["ip", "netns", "exec", self.ns(dst), sys.executable, "-c", listen],
                                  stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        try:
            server.stdout.readline()  # listening
            dial = self.exec(src, sys.executable, "-c",
                             f"import socket;socket.create_connection(('{ip}',{port}),timeout=2)", check=False)
            if dial.returncode != 0:
                return None
            return server.stdout.readline().strip() or None
        finally:
            server.kill()
            server.wait()

    def alive(self) -> list[str]:
        """Namespaces of this net that still exist."""
        return [n for n in _namespaces() if n in self.names.values()]

    def pids(self) -> list[int]:
        out = []
        for name in self.alive():
            out += [int(p) for p in _ip("netns", "pids", name, check=False).stdout.split()]
        return out

    def close(self) -> None:
        """Stop every process started here (SIGTERM, then SIGKILL after 20 s), kill whatever else
        still runs inside the namespaces, delete them."""
        stop_all(self.procs)
        for name in self.names.values():
            _remove(name)
