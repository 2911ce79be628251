"""The network steps of ``swarm-node doctor``, each bounded in time: dial a bootstrap peer's (or
broker's) TCP port, then join the swarm as a throw-away peer and listen to its heartbeats.

The join is the carrier's own (node/transport/from_config.py, one attempt, a fresh key: nothing
of the node's is used or written); what it reports is the transport's ``info()``, and what a
request of the caller's (``ask``: the doctor's dial-back) found while joined. Each heartbeat
heard is verified as a running node verifies it (signature and schema, node/swarm/admission.py),
with the clock check widened so that a skewed peer is measured rather than refused, and kept as
``(sender, signed_at, seen_at)``, ``seen_at`` the middle of the interval in which it first appeared
(from the start of the poll before to the end of the one that found it; node/swarm/clock_offset.py). Heartbeats found by the first poll are of any age and are not timed.
"""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from dataclasses import dataclass, field

from swarm_node.node.transport.addresses import tcp_endpoint
from swarm_node.node.transport.carriers import broker_carrier

__all__ = ["endpoint_of", "dial", "Listened", "join_and_listen"]

POLL_S = 0.25  # between heartbeat polls: half of it is the timing's uncertainty
CLOSE_S = 5.0  # leaving the swarm may take this long at most
# A doctor measures a clock well past a node's max_clock_skew, but not any stamp at all: a year-old
# heartbeat replayed, or a forged far-off one, is refused (counted under stale_clock) rather than timed.
SKEW_MEASURED_S = 86400.0


def endpoint_of(addr: str) -> tuple[str, int] | None:
    """``(host, port)`` a multiaddr (``/ip4/H/tcp/P/...``, ``/dns4/``, ``/dns/``, ``/ip6/``) or a
    broker URL dials; None for anything else (a relay circuit, a bare id, an unreadable URL)."""
    if "://" in addr:
        try:
            return broker_carrier().broker_endpoint(addr)
        except ValueError:
            return None
    return tcp_endpoint(addr)


async def dial(host: str, port: int, timeout: float) -> tuple[bool, str, float]:
    """Open (and close) a TCP connection: ``(answered, why not, seconds)``."""
    t0 = time.monotonic()
    try:
        _, writer = await asyncio.wait_for(asyncio.open_connection(host, port), timeout)
    except asyncio.TimeoutError:
        return False, f"no answer in {timeout:g} s (down, or a firewall drops it)", time.monotonic() - t0
    except ConnectionRefusedError:
        return False, "connection refused (nothing listens on that port)", time.monotonic() - t0
    except OSError as e:
        return False, e.strerror or str(e), time.monotonic() - t0
    writer.close()
    try:
        await asyncio.wait_for(writer.wait_closed(), 1.0)
    except (OSError, asyncio.TimeoutError):
        pass
    return True, "", time.monotonic() - t0


@dataclass
class Listened:
    """What joining and listening found."""

    joined: bool = False
    error: str = ""  # why the join failed
    join_s: float = 0.0
    info: dict = field(default_factory=dict)  # the transport's info() once joined
    heard: set[str] = field(default_factory=set)  # every peer whose heartbeat verified
    stamps: list[tuple[str, float, float]] = field(default_factory=list)  # (sender, signed_at, seen_at)
    refused: Counter = field(default_factory=Counter)  # heartbeats that failed a check, by reason
    asked: list = field(default_factory=list)  # what ``ask`` returned (the doctor: dial-back answers)


async def join_and_listen(sc, *, join_timeout: float, window: float, ask=None, ask_timeout: float = 15.0) -> Listened:
    """Join the swarm ``sc`` (the ``[swarm]`` config) as a throw-away peer within ``join_timeout``
    seconds, then poll its heartbeats for ``window`` seconds, then ``await ask(transport)`` (a
    list, at most ``ask_timeout`` seconds) when given; leave. Never raises for the network."""
    from swarm_node.node.swarm.admission import Refused, open_message
    from swarm_node.node.transport.from_config import transport_from_config
    from swarm_node.protocol.identity import Identity
    from swarm_node.protocol.messages import Announcement
    from swarm_node.protocol.signing import Verifier

    out = Listened()
    ident = Identity.generate()
    t0 = time.monotonic()
    try:
        transport = transport_from_config(sc.model_copy(update={"join_retries": 0}), ident)
        await asyncio.wait_for(transport.start(), join_timeout)
    except asyncio.TimeoutError:
        out.error, out.join_s = f"not joined in {join_timeout:g} s", time.monotonic() - t0
        return out
    except Exception as e:  # noqa: BLE001 - any failure to join is the finding
        out.error, out.join_s = f"{type(e).__name__}: {e}", time.monotonic() - t0
        return out
    out.joined, out.join_s = True, time.monotonic() - t0
    verifier = Verifier(max_skew_s=SKEW_MEASURED_S)
    try:
        before: float | None = None
        end = time.monotonic() + window
        while True:
            at = time.time()
            try:
                found = await asyncio.wait_for(transport.poll_announcements(), max(1.0, window))
            except Exception:  # noqa: BLE001 - a failed poll is a poll that found nothing
                found = []
            done = time.time()
            for d in found:
                try:
                    env, msg = open_message(d, Announcement, verifier)
                except Refused as r:
                    out.refused[r.reason] += 1
                    continue
                if msg.sender == ident.peer_id:
                    continue
                out.heard.add(msg.sender)
                if before is not None:
                    out.stamps.append((msg.sender, env.timestamp, (before + done) / 2))
            before = at
            if time.monotonic() >= end:
                break
            await asyncio.sleep(min(POLL_S, max(0.0, end - time.monotonic())))
        out.info = dict(transport.info())
        if ask is not None:
            try:
                out.asked = list(await asyncio.wait_for(ask(transport), ask_timeout))
            except Exception:  # noqa: BLE001 - an unanswered request is reported as no answer
                out.asked = []
    finally:
        try:
            await asyncio.wait_for(transport.close(), CLOSE_S)
        except Exception:  # noqa: BLE001 - leaving is best effort
            pass
    return out
