"""What ``swarm-node sim`` readies before its nodes start: the embedded default model (built once
for all of them), then the bootstrap peer (hivemind, libp2p) or the Mosquitto broker (mqtt)
they join through.
"""

from __future__ import annotations

import asyncio
import logging
import time

from swarm_node.node.errors import ConfigError, NodeError
from swarm_node.node.sim.children import Children, die_with_parent
from swarm_node.node.sim.spec import SimSpec
from swarm_node.node.transport.carriers import carrier

log = logging.getLogger(__name__)


def spawn_bootstrap(spec: SimSpec, kids: Children, port: int):
    """The bootstrap peer's process on loopback: on ``port`` (0: any free one), with the run's own
    key, so a restart on the same port (node/sim/timed.py) has the same address. It writes its
    address to ``bootstrap.maddr`` once it listens."""
    key = carrier(spec.transport).bootstrap_key
    return kids.spawn("bootstrap", ["bootstrap", "--transport", spec.transport, "--host", "127.0.0.1", "--port", str(port),
                                    "--no-nat", "--no-relay", "--identity", str(spec.run_dir / key),
                                    "--maddr-file", str(spec.run_dir / "bootstrap.maddr")], spec.run_dir / "bootstrap.log")


async def start_bootstrap(spec: SimSpec, kids: Children, stop: asyncio.Event) -> str | None:
    """Start the bootstrap peer on loopback and return its address; None on Ctrl-C first."""
    maddr_file = spec.run_dir / "bootstrap.maddr"
    # An earlier run's file names that run's port: wait for this bootstrap peer's own.
    maddr_file.unlink(missing_ok=True)
    p = spawn_bootstrap(spec, kids, 0)
    deadline = time.time() + spec.startup_timeout
    while not maddr_file.exists():
        if stop.is_set():
            return None
        if p.poll() is not None:
            raise RuntimeError(f"the bootstrap peer exited (rc {p.returncode}); see {spec.run_dir / 'bootstrap.log'}")
        if time.time() > deadline:
            raise RuntimeError(f"the bootstrap peer did not start in {spec.startup_timeout:.0f} s")
        await asyncio.sleep(0.2)
    return maddr_file.read_text().split()[0]


async def start_broker(spec: SimSpec):
    """A Mosquitto for the nodes (anonymous, on a free loopback port), in <run dir>/broker."""
    from swarm_node.node.transport.mqtt.broker import Mosquitto

    broker = Mosquitto(spec.run_dir / "broker", preexec_fn=die_with_parent)  # BrokerMissing: a ConfigError
    await asyncio.to_thread(broker.start, spec.startup_timeout)
    log.info("sim: Mosquitto listening on %s", broker.url())
    return broker


async def prepare_models(names: tuple[str, ...], mode: str, stop: asyncio.Event) -> bool:
    """Build, fetch or convert (or find cached) the models the nodes make themselves, once, here,
    before the nodes start: N nodes building one at once would each spend N times as long on the
    same cores. False if Ctrl-C came first (the build thread is abandoned; its temporary folder is
    cleaned next time)."""
    from swarm_node.node.daemon_thread import run_in_daemon_thread
    from swarm_node.policies.model_source import resolve_model

    news = {"line": "starting", "since": time.time()}
    what = "the embedded default model" if names == ("default",) else ", ".join(names)

    def progress(line: str) -> None:
        news["line"] = line

    def prepare() -> list[str]:
        return [resolve_model(n, progress=progress).path for n in names]

    build = asyncio.ensure_future(run_in_daemon_thread(prepare))
    live = None
    if mode == "rich":
        from rich.console import Console
        from rich.live import Live

        live = Live("", console=Console(stderr=True), refresh_per_second=2)
        live.start()
    last_plain = 0.0
    stopped = asyncio.ensure_future(stop.wait())
    try:
        while not build.done():
            text = f"building {what} (once; cached after): {news['line']}, " \
                   f"{time.time() - news['since']:.0f} s"
            if live is not None:
                live.update(text)
            elif mode == "plain" and time.time() - last_plain >= 5:
                last_plain = time.time()
                log.info("sim: %s", text)
            await asyncio.wait({build, stopped}, timeout=0.5, return_when=asyncio.FIRST_COMPLETED)
            if stop.is_set():
                return False
    finally:
        stopped.cancel()
        if not build.done():
            build.cancel()  # the thread itself is abandoned (daemon); its folder is temporary
        if live is not None:
            live.stop()
    from swarm_node.policies.errors import ModelSourceError

    try:
        path = build.result()
    except ModelSourceError as e:  # what was named cannot be had (a failed fetch, a bad file): exit 2
        raise ConfigError(str(e)) from None
    except Exception as e:
        raise NodeError(f"building {what} failed: {type(e).__name__}: {e}") from e
    log.info("sim: model ready at %s (%.0f s)", ", ".join(path), time.time() - news["since"])
    return True
