"""Dial-back over hivemind: whether a node's listening port is reachable from a peer, asked of a peer.

A node cannot see its own port from outside, and hivemind's p2pd runs AutoNAT without reporting
the result over its control API (its ``identify`` gives the listening addresses, and observed
ones only once several peers agree). What p2pd does give a stream handler is the address the
stream's connection came from: the asker's address as the server sees it (its router's public
address, behind NAT). So a bootstrap peer, and every hivemind node (any may be named a
bootstrap), serves ``DIALBACK`` (``serve_dialback``): the asker names one TCP port; the server
opens a TCP connection to that port *at the asker's observed address*, never at a host the asker
names (it cannot be used to probe third parties), checks that a libp2p listener answers there
(the multistream header), and replies with what it saw.
``ask_dialback`` is the asker's side (``swarm-node doctor``): it keeps a reply only when its
address parses as a direct /ip4 or /ip6 one and strips control characters from the peer's text
(``direct_address`` in node/transport/addresses.py, ``printable`` in
node/observe/peer_text.py). A connection that came through a relay has no direct
address to dial, and the reply says so.

Bounded on the server, and nothing ever waits: a request is one line of at most ``MAX_REQUEST``
bytes read within ``DIAL_S``; at most ``OPEN`` requests are open at once and at most
``CONCURRENT`` dials are in flight, one per asker's IP (per /64 for IPv6) and one per IP every
``PER_IP_S`` (``DialGate``, a table of at most ``TRACKED`` IPs); a request past any of these is
refused at once ("busy"), each dial given ``DIAL_S``.
"""

from __future__ import annotations

import asyncio
import ipaddress
import json
import logging
import time
from collections import OrderedDict
from dataclasses import dataclass

from swarm_node.node.observe.peer_text import printable
from swarm_node.node.transport.addresses import direct_address, host_port, observed_host

__all__ = ["DIALBACK", "Reach", "DialGate", "serve_dialback", "ask_dialback", "probe_listener", "requested_port"]

log = logging.getLogger(__name__)

DIALBACK = "swarm-node/dialback/1"
DIAL_S = 3.0  # the server's TCP dial and the listener's answer, each
MAX_REQUEST = 64  # bytes: {"port": N} and a newline
CONCURRENT = 4  # dials in flight on a server
OPEN = 16  # requests open on a server (reading, dialing, answering): each is one p2pd socket, one fd
PER_IP_S = 10.0  # one dial per asker's IP this often: a doctor asks each peer once a run
TRACKED = 1024  # IPs whose last dial is remembered (the oldest forgotten first)
MULTISTREAM = b"\x13/multistream/1.0.0\n"  # what a libp2p dialer sends first; a listener echoes it


@dataclass(frozen=True)
class Reach:
    """One peer's answer: the address it saw this node at, what it dialed, and what answered."""

    peer: str  # the peer asked
    port: int  # the listening port asked about
    observed: str = ""  # the asker's address as that peer saw it (a multiaddr)
    dialed: str = ""  # host:port it dialed ([host]:port for IPv6; "" when it could not dial)
    reachable: bool = False
    why: str = ""  # what failed, when not reachable or not asked


def requested_port(line: bytes) -> int | None:
    """The port of a ``{"port": N}`` request, None for anything else. Hostile JSON may give a
    float (``1e400`` is inf: ``int()`` raises OverflowError), a bool, a string or deep nesting."""
    if len(line) > MAX_REQUEST:
        return None
    try:
        req = json.loads(line)
    except (ValueError, RecursionError):
        return None
    port = req.get("port") if isinstance(req, dict) else None
    return port if type(port) is int and 0 < port < 65536 else None  # type(): a bool is an int too


class DialGate:
    """Who may be dialed now. Refusals are immediate, never a wait: a waiting request holds its
    stream, one Unix-socket connection to p2pd (a file descriptor), so a queue of them is a way to
    run a node out of descriptors and to make honest askers wait minutes."""

    def __init__(self, per_ip_s: float = PER_IP_S, clock=time.monotonic):
        self.per_ip_s, self.clock = per_ip_s, clock
        self.dialing: set[str] = set()
        self.last: OrderedDict[str, float] = OrderedDict()  # IP key -> when its last dial began

    @staticmethod
    def key(host: str) -> str:
        """The IP, or its /64 for IPv6: one subscriber holds a whole /64, and would get a dial per address."""
        ip = ipaddress.ip_address(host)
        return str(ipaddress.ip_network(f"{ip}/64", strict=False)) if ip.version == 6 else str(ip)

    def admit(self, host: str) -> str:
        """"" when ``host`` may be dialed now (the dial is counted: call ``done``), else why not."""
        key, now = self.key(host), self.clock()
        while self.last and now - next(iter(self.last.values())) >= self.per_ip_s:
            self.last.popitem(last=False)  # in order of their dials: the oldest expire first
        if key in self.dialing:
            return "busy: a dial to this address is already in flight; ask again in a few seconds"
        if len(self.dialing) >= CONCURRENT:
            return f"busy: {CONCURRENT} dials in flight; ask again in a few seconds"
        if key in self.last:
            return f"busy: this address was dialed less than {self.per_ip_s:g} s ago; ask again then"
        self.dialing.add(key)
        self.last[key] = now
        while len(self.last) > TRACKED:
            self.last.popitem(last=False)
        return ""

    def done(self, host: str) -> None:
        self.dialing.discard(self.key(host))


async def probe_listener(host: str, port: int, timeout: float = DIAL_S) -> tuple[bool, str]:
    """Connect to ``host:port`` and check a libp2p listener answers: ``(reachable, why not)``."""
    try:
        reader, writer = await asyncio.wait_for(asyncio.open_connection(host, port), timeout)
    except asyncio.TimeoutError:
        return False, f"no answer in {timeout:g} s (a firewall or NAT drops it)"
    except ConnectionRefusedError:
        return False, "connection refused (nothing listens there: a NAT without this port forwarded, or a firewall)"
    except OSError as e:
        return False, e.strerror or str(e)
    try:
        writer.write(MULTISTREAM)
        await writer.drain()
        if await asyncio.wait_for(reader.readexactly(len(MULTISTREAM)), timeout) == MULTISTREAM:
            return True, ""
        return False, "something answered, but not a libp2p peer (another service on that port?)"
    except (asyncio.TimeoutError, asyncio.IncompleteReadError, OSError):
        return False, "a connection opened, but no libp2p peer answered on it"
    finally:
        writer.close()


async def serve_dialback(p2p, gate: DialGate | None = None) -> None:
    """Serve ``DIALBACK`` on ``p2p`` (a hivemind ``P2P``) until it shuts down."""
    gate = gate or DialGate()
    open_ = [0]  # requests open now

    async def handle(info, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        if open_[0] >= OPEN:  # refused unread: as the transport's serve slots, nothing queues
            writer.close()
            return
        open_[0] += 1
        observed = str(info.addr)
        try:
            port = requested_port(await asyncio.wait_for(reader.readuntil(b"\n"), DIAL_S))
            if port is None:
                return
            host = observed_host(observed)
            if host is None:
                reply = {"observed": observed, "dialed": "", "reachable": False,
                         "why": "the request came through a relay: there is no direct address to dial"}
            elif refused := gate.admit(host):
                # No observed address: an asker counts the reply as no answer (an older one too), not as "unreachable".
                reply = {"observed": "", "dialed": "", "reachable": False, "why": refused}
            else:
                try:
                    ok, why = await probe_listener(host, port)
                finally:
                    gate.done(host)
                reply = {"observed": observed, "dialed": host_port(host, port), "reachable": ok, "why": why}
            writer.write(json.dumps(reply).encode() + b"\n")
            await writer.drain()
        except (asyncio.TimeoutError, asyncio.IncompleteReadError, asyncio.LimitOverrunError, OSError):
            pass  # an abandoned or oversized request gets no answer
        except Exception as e:  # noqa: BLE001 - whatever a hostile request causes: a line, not a traceback each
            log.debug("dial-back request from %s failed: %s: %s", observed, type(e).__name__, e)
        finally:
            open_[0] -= 1
            writer.close()

    await p2p.add_binary_stream_handler(DIALBACK, handle)


def _reach(peer: str, port: int, reply: object) -> Reach:
    """A peer's reply as a ``Reach``, only what parses kept: an observed address that is not a
    direct /ip4 or /ip6 one makes it no answer (its text is shown, made printable)."""
    if not isinstance(reply, dict):
        return Reach(peer, port, why="no answer (the reply is not a JSON object)")
    why = printable(reply.get("why", ""))
    seen = direct_address(reply.get("observed"))
    if seen is None:
        return Reach(peer, port, why=why or "no answer (the reply named no direct address)")
    observed = f"/ip{6 if ':' in seen[0] else 4}/{seen[0]}/tcp/{seen[1]}"
    dialed = host_port(seen[0], port) if reply.get("dialed") else ""  # it dials the observed IP, the port asked
    return Reach(peer, port, observed=observed, dialed=dialed, reachable=reply.get("reachable") is True, why=why)


async def ask_dialback(p2p, peer: str, port: int, timeout: float) -> Reach:
    """Ask ``peer`` (a base58 libp2p id this node is connected to) to dial ``port`` back."""
    from hivemind.p2p import PeerID

    try:
        _, reader, writer = await asyncio.wait_for(
            p2p.call_binary_stream_handler(PeerID.from_base58(peer), DIALBACK), timeout)
    except Exception as e:  # noqa: BLE001 - any failure to ask is the answer
        return Reach(peer, port, why=f"could not ask ({type(e).__name__}: {printable(e)}); a bootstrap older than "
                                     f"dial-back, or not a swarm-node peer, does not answer")
    try:
        writer.write(json.dumps({"port": port}).encode() + b"\n")
        await writer.drain()
        line = await asyncio.wait_for(reader.readline(), timeout + 2 * DIAL_S)
        return _reach(peer, port, json.loads(line))
    except Exception as e:  # noqa: BLE001
        return Reach(peer, port, why=f"no answer ({type(e).__name__}: {printable(e)})")
    finally:
        writer.close()
