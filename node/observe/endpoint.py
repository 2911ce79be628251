"""The node's Prometheus endpoint: the numbers of ``status.json``, scrapeable over HTTP.

Off unless ``run.metrics_port`` is set. The trainer hands ``update`` the same snapshot it writes
to ``status.json`` after every step, and a collector turns the latest snapshot into metric
families when Prometheus scrapes, so the endpoint and the status file can never disagree. Each
node has its own registry, so several nodes in one process (tests, simulation) do not clash.

Exposed (prefix ``swarm_node_``; totals are counters, the rest gauges)::

    node_info{peer_id, model, transport} 1   step, total_steps, policy_version
    reward, correct, rho, lr_factor, lr, tokens_per_second, step_seconds     (last step)
    held_out_correct{family, mode}, held_out_step, held_out_seconds          (after an evaluation)
    round, rounds_skipped_total, peers_alive, peers_heard, pool_groups       (in a swarm)
    rollouts_out_total, groups_in_total, groups_used_total, groups_dropped_total{why}
    rejected_total{reason}, errors_total{kind}
    broker_connected, broker_reconnects_total, outgoing_queued,                (over mqtt)
    outgoing_total{fate}: queued, published, dropped, expired, replaced, failed
"""

from __future__ import annotations

import logging
import threading
from typing import Iterator

from prometheus_client import CollectorRegistry, start_http_server
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, InfoMetricFamily
from prometheus_client.registry import Collector

log = logging.getLogger(__name__)

__all__ = ["MetricsEndpoint"]

_PREFIX = "swarm_node_"
# (metric, key in the last metrics record, help)
_LAST_STEP = (
    ("reward", "reward", "mean total reward of this node's completions, last step"),
    ("correct", "correct", "fraction of this node's completions that were correct, last step"),
    ("rho", "rho", "ESS / batch size of the last update"),
    ("lr_factor", "lr_factor", "ESS learning-rate factor of the last update"),
    ("lr", "lr", "learning rate of the last update"),
    ("tokens_per_second", "tokens_per_s", "generation throughput, last step"),
    ("step_seconds", "step_time", "wall time of the last step"),
)


class _Collector(Collector):
    def __init__(self, endpoint: "MetricsEndpoint"):
        self.endpoint = endpoint

    def collect(self) -> Iterator:
        snap = self.endpoint.snapshot()
        if not snap:
            return
        last = snap.get("last") or {}
        swarm = snap.get("swarm")
        info = InfoMetricFamily(_PREFIX + "node", "who this node is")
        info.add_metric([], {"peer_id": (swarm or {}).get("peer_id", ""),
                             "model": str(snap.get("model", "")),
                             "transport": (swarm or {}).get("transport", "none")})
        yield info
        for name, value, help_ in (("step", snap.get("step"), "training steps done"),
                                   ("total_steps", snap.get("total_steps"), "training steps configured"),
                                   ("policy_version", last.get("policy_version"), "optimizer updates applied")):
            if value is not None:
                yield GaugeMetricFamily(_PREFIX + name, help_, value=value)
        for name, key, help_ in _LAST_STEP:
            if last.get(key) is not None:
                yield GaugeMetricFamily(_PREFIX + name, help_, value=last[key])
        if isinstance(snap.get("eval"), dict):
            yield from _held_out(snap["eval"])
        if swarm is None:
            return
        for name, value, help_ in (("round", last.get("round"), "round of the shared clock of the last step"),
                                   ("peers_alive", swarm["peers_alive"], "peers with a fresh verified heartbeat"),
                                   ("peers_heard", swarm["peers_heard"], "peers whose rollouts were admitted"),
                                   ("pool_groups", swarm["pool"], "admitted peer groups not used yet")):
            if value is not None:
                yield GaugeMetricFamily(_PREFIX + name, help_, value=value)
        for name, value, help_ in (
                ("rounds_skipped", last.get("rounds_skipped", 0), "rounds skipped because a step overran"),
                ("rollouts_out", swarm["rollouts_out"], "rollouts published"),
                ("groups_in", swarm["groups_in"], "peer groups admitted"),
                ("groups_used", swarm["groups_used"], "peer groups trained on")):
            yield CounterMetricFamily(_PREFIX + name, help_, value=value)
        dropped = CounterMetricFamily(_PREFIX + "groups_dropped", "admitted peer groups never used", labels=["why"])
        dropped.add_metric(["stale"], swarm["dropped_stale"])
        dropped.add_metric(["pool_full"], swarm.get("dropped_full", 0))
        yield dropped
        rejected = CounterMetricFamily(_PREFIX + "rejected", "peer messages rejected, by reason", labels=["reason"])
        for reason, n in sorted(swarm["rejected"].items()):
            rejected.add_metric([reason], n)
        yield rejected
        errors = CounterMetricFamily(_PREFIX + "errors", "swarm I/O and internal errors", labels=["kind"])
        for kind in ("publish_errors", "heartbeat_errors", "poll_errors", "internal_errors", "fetch_failures"):
            if kind in swarm:
                errors.add_metric([kind.removesuffix("_errors").removesuffix("_failures")], swarm[kind])
        yield errors
        if "broker" in swarm:  # a carrier that meets at a broker reports its connection
            yield GaugeMetricFamily(_PREFIX + "broker_connected", "1 while connected to the broker",
                                    value=1 if swarm.get("connected") else 0)
            yield CounterMetricFamily(_PREFIX + "broker_reconnects", "reconnections to the broker",
                                      value=swarm.get("reconnects", 0))
            yield GaugeMetricFamily(_PREFIX + "outgoing_queued", "own envelopes waiting for the broker",
                                    value=swarm.get("queued", 0))
            out = CounterMetricFamily(_PREFIX + "outgoing", "own envelopes handed to the broker link, by fate",
                                      labels=["fate"])
            for fate in ("queued", "published", "dropped", "expired", "replaced", "failed"):
                out.add_metric([fate], swarm.get(f"mqtt_{fate}", 0))
            yield out


def _held_out(ev: dict) -> Iterator:
    """The latest held-out evaluation (node/evaluate/evaluate.py): correctness by family ("all" for
    every family together) and mode (greedy, sampled, pass_at_k), its step and its duration."""
    correct = GaugeMetricFamily(_PREFIX + "held_out_correct", "held-out pass@1 (greedy or sampled) or pass@k, "
                                "latest evaluation, by family (all = overall) and mode", labels=["family", "mode"])
    for family, stats in (("all", ev), *(ev.get("families") or {}).items()):
        for mode in ("greedy", "sampled", "pass_at_k"):
            if stats.get(mode) is not None:
                correct.add_metric([family, mode], stats[mode])
    yield correct
    for name, key, help_ in (("held_out_step", "step", "step after which the latest held-out evaluation ran"),
                             ("held_out_seconds", "seconds", "wall time of the latest held-out evaluation")):
        if ev.get(key) is not None:
            yield GaugeMetricFamily(_PREFIX + name, help_, value=ev[key])


class MetricsEndpoint:
    """An HTTP server (its own thread) answering Prometheus scrapes with the latest snapshot."""

    def __init__(self, host: str, port: int):
        self.host = host
        self.port = port
        self.registry = CollectorRegistry(auto_describe=False)
        self.registry.register(_Collector(self))
        self._snapshot: dict = {}
        self._lock = threading.Lock()  # scrapes run on the server's thread
        self._server = None

    def start(self) -> int:
        """Bind and serve; returns the port (useful with port 0)."""
        self._server, _ = start_http_server(self.port, addr=self.host, registry=self.registry)
        self.port = self._server.server_port
        log.info("metrics endpoint: http://%s:%d/metrics", self.host, self.port)
        return self.port

    def update(self, snapshot: dict) -> None:
        with self._lock:
            self._snapshot = snapshot

    def snapshot(self) -> dict:
        with self._lock:
            return self._snapshot

    def close(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None
