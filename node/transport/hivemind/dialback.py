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
``ask_dialback`` is the asker's side (``swarm-node doctor``). A connection that came through a
relay has no direct address to dial, and the reply says so.

Bounded on the server: a request is one line of at most ``MAX_REQUEST`` bytes read within
``DIAL_S``, at most ``CONCURRENT`` dials at once (more askers wait), each given ``DIAL_S``.
"""

from __future__ import annotations

import asyncio
import json
import logging
from dataclasses import dataclass

__all__ = ["DIALBACK", "Reach", "serve_dialback", "ask_dialback", "observed_host", "probe_listener"]

log = logging.getLogger(__name__)

DIALBACK = "swarm-node/dialback/1"
DIAL_S = 3.0  # the server's TCP dial and the listener's answer, each
MAX_REQUEST = 64  # bytes: {"port": N} and a newline
CONCURRENT = 4  # dials in flight on a server
MULTISTREAM = b"\x13/multistream/1.0.0\n"  # what a libp2p dialer sends first; a listener echoes it


@dataclass(frozen=True)
class Reach:
    """One peer's answer: the address it saw this node at, what it dialed, and what answered."""

    peer: str  # the peer asked
    port: int  # the listening port asked about
    observed: str = ""  # the asker's address as that peer saw it (a multiaddr)
    dialed: str = ""  # host:port it dialed ("" when it could not dial)
    reachable: bool = False
    why: str = ""  # what failed, when not reachable or not asked


def observed_host(maddr: str) -> str | None:
    """The IP a direct connection came from (``/ip4/H/tcp/P``, ``/ip6/...``); None for a relayed one."""
    parts = maddr.strip("/").split("/")
    if "p2p-circuit" in parts or len(parts) < 2 or parts[0] not in ("ip4", "ip6"):
        return None
    return parts[1]


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


async def serve_dialback(p2p) -> None:
    """Serve ``DIALBACK`` on ``p2p`` (a hivemind ``P2P``) until it shuts down."""
    dials = asyncio.Semaphore(CONCURRENT)

    async def handle(info, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        observed = str(info.addr)
        try:
            line = await asyncio.wait_for(reader.readuntil(b"\n"), DIAL_S)
            if len(line) > MAX_REQUEST:
                return
            port = int(json.loads(line)["port"])
            if not 0 < port < 65536:
                return
            host = observed_host(observed)
            if host is None:
                reply = {"observed": observed, "dialed": "", "reachable": False,
                         "why": "the request came through a relay: there is no direct address to dial"}
            else:
                async with dials:
                    ok, why = await probe_listener(host, port)
                reply = {"observed": observed, "dialed": f"{host}:{port}", "reachable": ok, "why": why}
            writer.write(json.dumps(reply).encode() + b"\n")
            await writer.drain()
        except (asyncio.TimeoutError, asyncio.IncompleteReadError, asyncio.LimitOverrunError, OSError,
                ValueError, KeyError, TypeError):
            pass  # a malformed or abandoned request gets no answer
        finally:
            writer.close()

    await p2p.add_binary_stream_handler(DIALBACK, handle)


async def ask_dialback(p2p, peer: str, port: int, timeout: float) -> Reach:
    """Ask ``peer`` (a base58 libp2p id this node is connected to) to dial ``port`` back."""
    from hivemind.p2p import PeerID

    try:
        _, reader, writer = await asyncio.wait_for(
            p2p.call_binary_stream_handler(PeerID.from_base58(peer), DIALBACK), timeout)
    except Exception as e:  # noqa: BLE001 - any failure to ask is the answer
        return Reach(peer, port, why=f"could not ask ({type(e).__name__}: {e}); a bootstrap older than "
                                     f"dial-back, or not a swarm-node peer, does not answer")
    try:
        writer.write(json.dumps({"port": port}).encode() + b"\n")
        await writer.drain()
        reply = json.loads(await asyncio.wait_for(reader.readline(), timeout + 2 * DIAL_S))
        return Reach(peer, port, observed=str(reply["observed"]), dialed=str(reply["dialed"]),
                     reachable=bool(reply["reachable"]), why=str(reply["why"]))
    except Exception as e:  # noqa: BLE001
        return Reach(peer, port, why=f"no answer ({type(e).__name__}: {e})")
    finally:
        writer.close()
