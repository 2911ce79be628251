"""The verdicts of ``swarm-node doctor``: each check as one line (ok, warn or fail, what was found,
the fix when not ok), the exit code, and the pure judgements behind the lines that need one
(addresses, NAT and the port's reachability from a peer's dial-back, clock offset, free disk). Nothing here touches the network or a file: the
command (node/cli/doctor/command.py) measures, these functions judge.
"""

from __future__ import annotations

import ipaddress
import json
import shlex
from dataclasses import asdict, dataclass

from swarm_node.node.swarm.clock_offset import MIN_PEERS, SKEW_FRACTION, agreeing, median_offset, peer_offsets, skew_exceeds
from swarm_node.node.transport.addresses import direct_address, relayed
from swarm_node.node.observe.peer_text import printable
from swarm_node.node.transport.carriers import CARRIERS, the

__all__ = ["Check", "render", "exit_code", "report", "address_check", "nat_check", "reach_checks", "listening_port",
           "clock_check", "disk_check", "checkpoint_bytes"]

GiB = 1024 ** 3


@dataclass(frozen=True)
class Check:
    name: str
    status: str  # ok, warn or fail
    found: str
    fix: str = ""


def render(c: Check) -> str:
    """One line: status, check, what was found, and the fix when not ok."""
    fix = f"  fix: {printable(c.fix, None)}" if c.fix and c.status != "ok" else ""
    return f"{c.status:<4}  {c.name:<9}  {printable(c.found, None)}{fix}"  # peers' text: no escape reaches the terminal


def exit_code(checks: list[Check]) -> int:
    """0 when nothing failed (warnings allowed), 1 when something did."""
    return 1 if any(c.status == "fail" for c in checks) else 0


def report(checks: list[Check], **extra) -> dict:
    """The ``--json`` form: every check, the exit code, and measured values (``extra``)."""
    return {"ok": exit_code(checks) == 0, "exit": exit_code(checks), "checks": [asdict(c) for c in checks], **extra}


def _host(maddr: str) -> str | None:
    parts = maddr.strip("/").split("/")
    return parts[1] if len(parts) >= 2 and parts[0] in ("ip4", "ip6") else None


def _kind(maddr: str) -> str:
    """public, private, loopback or name (a DNS name: where it points is not known here)."""
    host = _host(maddr)
    if host is None:
        return "name"
    ip = ipaddress.ip_address(host)
    return "loopback" if ip.is_loopback else "private" if (ip.is_private or ip.is_link_local) else "public"


def address_check(maddrs: list[str], carrier: str) -> Check:
    """The addresses the joined transport gives its peers (its ``info()``)."""
    if not CARRIERS[carrier].listens:
        return Check("addresses", "ok", f"none needed: over {carrier} every node dials out to the broker")
    if not maddrs:
        return Check("addresses", "warn", f"the {carrier} transport reported no address",
                     "set --swarm.host_maddrs to an address of this machine, e.g. '[\"/ip4/0.0.0.0/tcp/31338\"]'")
    kinds = sorted({_kind(m) for m in maddrs})
    shown = ", ".join(maddrs[:4]) + (f" (+{len(maddrs) - 4})" if len(maddrs) > 4 else "")
    return Check("addresses", "ok", f"{len(maddrs)} address(es), {'/'.join(kinds)}: {shown}")


# Where no port can be forwarded (docs/nat.md): hivemind reaches a node through its bootstrap peers'
# relay (rollouts; a learner's weights are too big for a relayed connection); other carriers cannot.
NO_PORT = ("; if no port can be forwarded, join with --swarm.behind_nat true (peers then reach it through the "
           "bootstrap peers' relay: rollouts, not a learner's weights; docs/nat.md)")


def _relay_note(carrier: str, behind_nat: bool) -> str:
    """How peers outside this network reach a node they cannot dial, on this carrier."""
    if not CARRIERS[carrier].uses_nat_traversal:
        return "; this carrier has no relay, so peers outside this network cannot reach it"
    if behind_nat:
        return "; swarm.behind_nat is on: peers reach it through the bootstrap peers' relay"
    return "; without --swarm.behind_nat, peers outside this network cannot reach it at all"


def nat_check(maddrs: list[str], carrier: str, *, announced: bool, behind_nat: bool) -> Check:
    """NAT status as far as the transport tells it; reachability from outside is never guessed."""
    c = CARRIERS[carrier]
    if not c.listens:
        return Check("nat", "ok", "not needed: every node dials out to the broker (no port to open)")
    source = c.nat_report or f"the {carrier} transport reports none"
    kinds = {_kind(m) for m in maddrs}
    if "public" in kinds or "name" in kinds or announced:
        return Check("nat", "ok", f"unknown: {source}; a public address is announced, so peers can dial it "
                                  f"where its port is open")
    return Check("nat", "warn", f"unknown: {source}; every address is private or loopback, so peers outside "
                                f"this network cannot dial this node{_relay_note(carrier, behind_nat)}",
                 "behind NAT, fix a port (--swarm.host_maddrs '[\"/ip4/0.0.0.0/tcp/31338\"]'), forward it and "
                 "announce it (--swarm.announce_maddrs '[\"/ip4/PUBLIC_IP/tcp/31338\"]')"
                 + (NO_PORT if c.uses_nat_traversal and not behind_nat else "")
                 + "; on a private cluster or loopback this is expected")


def listening_port(maddrs: list[str]) -> int | None:
    """The TCP port of the first direct address the transport listens on (not a relay circuit)."""
    for m in maddrs:
        parts = m.strip("/").split("/")
        if not relayed(m) and len(parts) >= 4 and parts[2] == "tcp" and parts[3].isdigit():
            return int(parts[3])
    return None


def reach_checks(reaches: list, maddrs: list[str], *, behind_nat: bool, fixed_port: bool = False,
                 announced: bool = False, carrier: str | None = None) -> tuple[Check, Check]:
    """The nat and reachable lines from peers' dial-back answers (node/transport/hivemind/dialback.py's
    ``Reach``): where a peer saw this node (its address, or its router's: NAT) and whether that
    peer could open a connection to the listening port at that address."""
    carrier = carrier or the(lambda c: c.load_dialback is not None).name  # whose peers dial back
    answered = [r for r in reaches if direct_address(r.observed)]  # a peer's text: only a parseable address counts
    if not answered:
        why = printable(reaches[0].why) if reaches else "no peer to ask"
        return (nat_check(maddrs, carrier, announced=False, behind_nat=behind_nat),
                Check("reachable", "warn", f"unknown: no peer answered the dial-back request ({why})",
                      "ask through a bootstrap that runs this swarm-node version (`swarm-node bootstrap`)"))
    # The majority of the peers that answered: one peer (any node may be named a bootstrap) cannot
    # overrule the others; a tie is "not reachable", the verdict that asks the user to check.
    yes = [a for a in answered if a.reachable]
    reachable = 2 * len(yes) > len(answered)
    r = yes[0] if reachable else next(a for a in answered if not a.reachable)
    agreed = f" ({len(yes) if reachable else len(answered) - len(yes)} of {len(answered)} peer(s) that answered agree)"
    peer, why, dialed = printable(r.peer), printable(r.why), printable(r.dialed)
    seen, _ = direct_address(r.observed)
    hosts = sorted({h for h in map(_host, maddrs) if h})
    listening = [h for h in hosts if not ipaddress.ip_address(h).is_loopback] or hosts  # loopback is no target
    port = r.port
    if seen in hosts and announced:  # the transport gives peers the announced addresses only
        nat = Check("nat", "ok", f"peer {peer} saw this node at {seen}, the address it announces "
                                 f"(swarm.announce_maddrs)")
    elif seen in hosts:
        nat = Check("nat", "ok", f"none between this node and peer {peer}: it saw this node at {seen}, "
                                 f"an address it listens on")
    else:
        nat = Check("nat", "ok", f"behind NAT (or a proxy): peer {peer} saw this node at {r.observed}, "
                                 f"it listens on {', '.join(listening) or 'no direct address'} port {port}")
    ip = "ip6" if ":" in seen else "ip4"
    announce = f"--swarm.announce_maddrs {shlex.quote(json.dumps([f'/{ip}/{seen}/tcp/{port}']))}"
    if reachable:
        found = (f"port {port} is reachable: peer {peer} dialed {dialed} (where it saw this node) and this "
                 f"node's libp2p listener answered{agreed}")
        if seen in hosts:
            return nat, Check("reachable", "ok", found)
        return nat, Check("reachable", "warn", found + f", but this node does not give peers that address",
                          f"announce it: {announce} (else peers learn it only once libp2p's identify has "
                          f"seen it from several peers)")
    found = (f"port {port} is not reachable from peer {peer}{agreed}: {dialed or r.observed}: {why}"
             f"{'' if seen in hosts else _relay_note(carrier, behind_nat)}")  # no NAT: the firewall
    if seen in hosts:
        fix = f"open TCP port {port} in this machine's firewall (e.g. `ufw allow {port}/tcp`)"
    else:
        fix = (f"forward TCP port {port} on the router to this machine ({' or '.join(listening) or 'its address'} "
               f"port {port}) and announce it: {announce}" +
               ("" if fixed_port else f"; fix the port first (--swarm.host_maddrs '[\"/ip4/0.0.0.0/tcp/{port}\"]': "
                                      f"a free port changes at each start)") + ("" if behind_nat else NO_PORT))
    return nat, Check("reachable", "warn", found, fix)


def clock_check(stamps: list[tuple[str, float, float]], heard: int, *, round_seconds: float,
                uncertainty: float, window: float) -> tuple[Check, float | None]:
    """The clock line and the median offset (peers' clocks minus this one, seconds) or None.

    Keys are free, so a throw-away peer with no history cannot tell an honest peer from a forged
    one: each peer is one vote (the median of its own samples), no offset is reported from fewer
    than ``MIN_PEERS`` distinct peers, and none when most peers do not agree with their median
    (within a quarter round plus twice the timing's ±): a few keys with false stamps can make the
    line say "cannot tell", not report a wrong offset, unless they outnumber the honest peers."""
    offsets = peer_offsets(stamps)
    listen = ("listen longer (--window, above swarm.round_seconds), or check that peers run with this "
              "--swarm.name and --swarm.round_seconds; a new swarm has no peers yet")
    if not offsets:
        why = (f"heard {heard} peer(s), but no heartbeat new enough to time in {window:g} s"
               if heard else f"no peer's heartbeat heard in {window:g} s")
        return Check("clock", "warn", f"not measured: {why}", listen), None
    if len(offsets) < MIN_PEERS:
        return Check("clock", "warn", f"not measured: not enough peers: timed {len(offsets)} peer(s)' heartbeats in "
                                      f"{window:g} s, {MIN_PEERS} distinct peers needed (one or two keys could be "
                                      f"anyone's)", listen), None
    off = median_offset((o, 0.0) for o in offsets.values())
    tolerance = SKEW_FRACTION * round_seconds + 2 * uncertainty
    agree = agreeing(offsets.values(), off, tolerance)
    if 2 * agree <= len(offsets):
        return Check("clock", "warn", f"not measured: peers disagree: {agree} of {len(offsets)} peers' clocks are "
                                      f"within {tolerance:.2f} s of their median ({off:+.3f} s), so it cannot tell this "
                                      f"clock's offset (some peers' clocks are wrong, or their stamps forged)",
                     "check this clock against NTP (`timedatectl`, `chronyc tracking`); run the doctor again later"), None
    side = "behind" if off > 0 else "ahead of"
    found = (f"{abs(off):.3f} s {side} the median of {len(offsets)} peers' signed heartbeats ({agree} of them "
             f"within {tolerance:.2f} s of it; ±{uncertainty:.2f} s), {abs(off) / round_seconds:.2f} of a "
             f"{round_seconds:g} s round")
    fix = ("synchronise this machine's clock (NTP: `timedatectl set-ntp true`, or chrony); "
           "rounds come from wall clocks")
    if abs(off) - uncertainty >= round_seconds:
        return Check("clock", "fail", found + ": its rollouts go out under rounds its peers are not in", fix), off
    if skew_exceeds(off, round_seconds, uncertainty=uncertainty):
        return Check("clock", "warn", found + f": over {SKEW_FRACTION:g} of a round", fix), off
    return Check("clock", "ok", found), off


def checkpoint_bytes(params: int, lora_rank: int) -> int:
    """A rough size of one checkpoint: float32 weights and Adam's two moments (12 bytes a parameter);
    with LoRA the adapter only, counted generously at 1 byte per base parameter."""
    return params * (12 if lora_rank == 0 else 1)


def disk_check(path: str, free: int, need: int | None, what: str) -> Check:
    """Free space where the run folder goes, against ``need`` bytes (None: not estimated)."""
    found = f"{free / GiB:.1f} GiB free at {path}"
    if need is None:
        return Check("disk", "ok" if free >= GiB else "warn", f"{found} ({what})",
                     "free some space, or choose a --run.dir on a larger disk")
    found += f"; {what} need about {need / GiB:.2f} GiB"
    if free < need / 2:
        return Check("disk", "fail", found, "free space, lower --run.keep_checkpoints, or choose a --run.dir on a "
                                            "larger disk")
    if free < need:
        return Check("disk", "warn", found, "free space or lower --run.keep_checkpoints before the run fills the disk")
    return Check("disk", "ok", found)
