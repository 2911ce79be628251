"""``doctor``: what a node would meet if it joined now, one line per check, before it joins.

It reads the config exactly as ``join`` does (``join_overrides``), dials each bootstrap peer (or
the broker), checks the fixed listen ports are free, joins the swarm as a throw-away peer over
the carrier's own transport (node/cli/doctor/probe.py), reports the addresses the transport gives,
asks each bootstrap that answered to dial its listening port back (over hivemind: the address
the peer saw it at, so a NAT shows, and whether the port answers there:
node/transport/hivemind/dialback.py), times peers' signed heartbeats for ``--window`` seconds to
measure this clock's offset from the swarm, and names the device, the memory profile it would
pick and the free disk. Every network step is bounded; nothing is written. The verdicts are
node/cli/doctor/checkup.py's; the exit code is 1 when a check failed, else 0.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import shutil
import time
from pathlib import Path

from swarm_node.node.errors import ConfigError
from swarm_node.node.cli.doctor.checkup import (Check, address_check, checkpoint_bytes, clock_check, disk_check, exit_code,
                              listening_port, nat_check, reach_checks, render, report)

__all__ = ["run_doctor"]

ASK_S = 15.0  # the whole dial-back request; every peer is asked at once, each within ASK_FRACTION of it
ASK_FRACTION = 0.8  # what is left is for asking and gathering: one peer timing out never cancels the others


def run_doctor(args: argparse.Namespace, unknown: list[str]) -> int:
    from swarm_node.node.cli.train import check_swarm, join_overrides
    from swarm_node.node.observe.logs import setup_logging
    from swarm_node.node.config.resume_config import load_run_config

    setup_logging("ERROR")  # the check lines are the output; the transports' info logs would bury them
    t0 = time.monotonic()
    checks: list[Check] = []

    def say(c: Check) -> None:
        checks.append(c)
        if not args.json:
            print(render(c), flush=True)

    cfg, _ = load_run_config(args.config, join_overrides(args, unknown))  # a bad config: exit 2, as join
    try:
        check_swarm(cfg, new_swarm=False)
        say(Check("config", "ok", f"swarm {cfg.swarm.name!r} over {cfg.swarm.transport}, rounds of "
                                  f"{cfg.swarm.round_seconds:g} s, run folder {cfg.run.dir}"))
        offset = asyncio.run(_network(cfg, args, say))
    except ConfigError as e:
        say(Check("config", "fail", str(e).split(": pass")[0], str(e)))
        offset = None
    for check in (_device, _profile, _disk):
        say(check(cfg, args))
    rc = exit_code(checks)
    if args.json:
        print(json.dumps(report(checks, clock_offset_s=offset, seconds=round(time.monotonic() - t0, 2)), indent=2))
    else:
        print(f"{'something failed' if rc else 'nothing failed'} ({time.monotonic() - t0:.1f} s)")
    return rc


async def _network(cfg, args, say) -> float | None:
    from swarm_node.node.transport.carriers import carrier
    from swarm_node.node.transport.port_free import check_port_free
    from swarm_node.node.cli.doctor.probe import POLL_S, dial, endpoint_of, join_and_listen
    from swarm_node.node.swarm.clock_offset import DELIVERY_ALLOWANCE_S
    from swarm_node.node.transport.addresses import peer_id_of

    sc, c = cfg.swarm, carrier(cfg.swarm.transport)
    name = "broker" if c.needs_broker else "bootstrap"
    targets = [sc.broker] if c.needs_broker else list(sc.initial_peers)
    answered, peers = 0, []
    for addr in targets:
        where = endpoint_of(addr)
        if where is None:
            say(Check(name, "warn", f"{addr}: no host and TCP port to dial in it", "give a /ip4/HOST/tcp/PORT/p2p/ID "
                                                                                   "address, as `swarm-node bootstrap` prints it"))
            continue
        ok, why, secs = await dial(*where, args.timeout)
        answered += ok
        peers += [peer_id_of(addr)] if ok and peer_id_of(addr) else []
        say(Check(name, "ok", f"{addr} answered in {secs:.2f} s") if ok else
            Check(name, "fail", f"{addr} did not answer: {why}",
                  "check the address, that the peer is running and that its port is open to this machine"))
    for maddr in sc.host_maddrs:
        host, port = endpoint_of(maddr) or ("", 0)
        if port:
            try:
                check_port_free(host, port)
                say(Check("port", "ok", f"{host}:{port} is free to listen on"))
            except ConfigError as e:
                say(Check("port", "fail", str(e).split(": choose")[0], f"choose another port in --swarm.host_maddrs, "
                                                                        f"or stop what listens on {port}"))
        else:
            say(Check("port", "ok", f"{maddr}: a free port picked at each start (behind NAT, fix one to forward it)"))
    if targets and not answered:
        say(Check("join", "warn", f"not tried: no {name} answered"))
        say(Check("clock", "warn", "not measured: not joined"))
        return None
    got = await join_and_listen(sc, join_timeout=sc.startup_timeout + args.timeout, window=args.window,
                                ask_timeout=ASK_S, ask=_dialback(c, peers, args.timeout) if c.load_dialback else None)
    if not got.joined:
        say(Check("join", "fail", f"could not join over {c.name} in {got.join_s:.1f} s: {got.error}",
                  "see docs/troubleshooting.md for the message"))
        say(Check("clock", "warn", "not measured: not joined"))
        return None
    refused = f"; refused {sum(got.refused.values())} ({dict(got.refused)})" if got.refused else ""
    say(Check("join", "ok", f"joined swarm {sc.name!r} over {c.name} in {got.join_s:.1f} s; heard "
                            f"{len(got.heard)} peer(s)' heartbeats in {args.window:g} s{refused}"))
    maddrs = list(got.info.get("maddrs") or got.info.get("addrs") or [])
    say(address_check(maddrs, c.name))
    if c.load_dialback:  # peers answered where they saw this node and whether its port answered
        fixed = any((endpoint_of(m) or ("", 0))[1] for m in sc.host_maddrs)
        for check in reach_checks(got.asked, maddrs, behind_nat=sc.behind_nat, fixed_port=fixed,
                                  announced=bool(sc.announce_maddrs), carrier=c.name):
            say(check)
    else:
        say(nat_check(maddrs, c.name, announced=bool(sc.announce_maddrs), behind_nat=sc.behind_nat))
        if c.listens:  # else nothing listens: every node dials out to the broker
            say(Check("reachable", "warn", f"unknown: the {c.name} carrier has no dial-back to ask a peer with",
                      "check the port from another machine (`nc -vz PUBLIC_IP PORT`), or run the doctor "
                      "against a hivemind bootstrap"))
    check, offset = clock_check(got.stamps, len(got.heard), round_seconds=sc.round_seconds,
                                uncertainty=POLL_S / 2 + DELIVERY_ALLOWANCE_S, window=args.window)
    say(check)
    return offset


def _dialback(c, peers: list[str], timeout: float):
    """The request made while joined: each answered bootstrap (3 at most) is asked at once to dial
    the port back, each given its own time under the whole request's, so a slow or flooded peer
    costs its own answer, not the others'."""
    async def ask(transport) -> list:
        dialback = c.load_dialback()
        DIAL_S, Reach, ask_dialback = dialback.DIAL_S, dialback.Reach, dialback.ask_dialback

        port = listening_port(list(transport.maddrs))
        each = min(timeout + 2 * DIAL_S, ASK_FRACTION * ASK_S)

        async def one(peer: str) -> Reach:
            try:
                return await asyncio.wait_for(ask_dialback(transport.p2p, peer, port, timeout), each)
            except asyncio.TimeoutError:
                return Reach(peer, port, why=f"no answer in {each:g} s")
        return [] if port is None else list(await asyncio.gather(*(one(p) for p in peers[:3])))
    return ask


def _device(cfg, args) -> Check:
    from swarm_node.node.run.preflight import check_device

    try:
        check_device(cfg.model.device)
    except ConfigError as e:
        return Check("device", "fail", str(e).split("; ")[0], str(e))
    import torch

    if torch.device(cfg.model.device).type != "cuda":
        gpus = torch.cuda.device_count() if torch.cuda.is_available() else 0
        return Check("device", "ok", f"model.device {cfg.model.device}" +
                     (f" ({gpus} CUDA GPU(s) visible: --model.device cuda:0 uses one)" if gpus else ""))
    dev = torch.device(cfg.model.device)
    free, total = torch.cuda.mem_get_info(dev)
    return Check("device", "ok", f"model.device {cfg.model.device}: {torch.cuda.get_device_name(dev)}, "
                                 f"{free / 1024 ** 3:.1f} of {total / 1024 ** 3:.1f} GiB free")


def _profile(cfg, args) -> Check:
    from swarm_node.node.gpu.select import describe, plan_profile

    try:
        plan = plan_profile(cfg, args.profile)
    except ConfigError as e:
        return Check("profile", "fail", str(e), "pass --profile none, or a smaller model or batch")
    if plan is not None:
        return Check("profile", "ok", describe(plan)[0])
    why = ("--profile none: the settings as configured" if args.profile == "none" else
           "none needed: the embedded default model" if cfg.model.name == "default" else
           f"none: model.device {cfg.model.device} is not a CUDA device (--profile 12gb plans for a 12 GB card)")
    return Check("profile", "ok", why)


def _model_params(name: str) -> int | None:
    """The model's parameter count from its config.json, read offline (a folder, or the Hub's cache)."""
    from swarm_node.node.gpu.profiles import ModelShape

    try:
        local = Path(name).expanduser()
        if local.is_dir():
            return ModelShape.from_config(json.loads((local / "config.json").read_text())).params()
        from transformers import AutoConfig

        return ModelShape.from_config(AutoConfig.from_pretrained(name, local_files_only=True).to_dict()).params()
    except Exception:  # noqa: BLE001 - not sized: the line says so
        return None


def _disk(cfg, args) -> Check:
    where = Path(cfg.run.dir).expanduser().absolute()
    while not where.exists() and where != where.parent:
        where = where.parent
    free = shutil.disk_usage(where).free
    if cfg.model.name == "default":
        return disk_check(str(where), free, None, "the embedded default model's checkpoints take a few MiB")
    params = _model_params(cfg.model.name)
    if params is None:
        return disk_check(str(where), free, None, f"{cfg.model.name}'s size is not known offline")
    keep = cfg.run.keep_checkpoints + 1  # one more while the next is written
    need = keep * checkpoint_bytes(params, cfg.model.lora_rank)
    chunks = cfg.broadcast.role != "full"
    need += params * 4 if chunks else 0  # a learner's or follower's weight chunks (RUN/broadcast)
    return disk_check(str(where), free, need, f"{keep} checkpoints" + (" and the weight chunks" if chunks else ""))
