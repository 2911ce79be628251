"""The latency and throughput benchmark's report: the latency table per N and transport, each
transport against memory, and the admission throughput."""

from __future__ import annotations

from swarm_bench.nodes import NODE_POLL_SECONDS


def ms(x: float | None) -> str:
    return "n/a" if x is None else f"{x * 1e3:.1f}"


def pct(x: float | None) -> str:
    return "n/a" if x is None else f"{x:.0%}"


def ratio(a: float | None, b: float | None) -> str:
    return "n/a" if a is None or b is None else f"{a / b:.2f}"


def throughput_row(name: str, x: dict, n: int) -> str:
    return f"| {name} | {x['msgs_per_s']:.0f} | {x['us_per_msg']:.0f} | {x['accepted']}/{n} |"


def markdown(result: dict) -> list[str]:
    b, runs, v, poll = result["batch"], result["latency"], result["verification"], result["poll_s"]
    md = [
        "# Swarm: publish-to-available latency and admission throughput",
        "",
        f"`{result['command']}`",
        "",
        f"Batch: {b['groups']} task groups x {b['completions_per_group']} completions = {b['records']} "
        f"records ({b['completion_tokens']} completion tokens, max_new_tokens {b['max_new_tokens']}) "
        f"from the embedded default model; signed envelope **{result['envelope_bytes']} bytes**.",
        "",
        f"Latency: from the publisher starting to sign the envelope until receivers have *admitted* "
        f"it (fetched, signature + replay checked, decoded, checked). One publisher + N receivers, all "
        f"in one Python process and event loop on loopback (each hivemind node still runs its own "
        f"p2pd daemon; hivemind adds a bootstrap DHT node). The libp2p rows run in a second Python "
        f"process of the same invocation (py-libp2p and hivemind cannot share one): each node a "
        f"py-libp2p host in a trio thread of its own, no daemon, plus a bootstrap host that joins no "
        f"topic; gossipsub pushes the envelope, each node's topic validator runs the admission checks "
        f"before forwarding it, and trials start once every node has min(N, 4) peers in its gossipsub "
        f"mesh. Receivers poll every {poll:g} s "
        f"(the node's default `swarm.poll_seconds` is {NODE_POLL_SECONDS:g} s) over the "
        f"{result['max_round_lag'] + 1} rounds of the staleness window: pull-based polling alone adds "
        f"~poll/2 = {poll / 2 * 1e3:.0f} ms on average (here {poll * 13 / 24 * 1e3:.0f} ms: "
        f"the sleep between polls is jittered ±50% because receivers sharing one event loop "
        f"phase-lock otherwise, unlike separate nodes). {result['trials']} trials per N "
        f"after {result['warmup']} warm-up trials, each a fresh signed envelope in a round of its own "
        f"({result['round_seconds']:g} s rounds: a node publishes one batch a round, and the "
        f"transports pass on one body per publisher and round).",
        "",
        "| N | transport | median all N (ms) | p95 all N (ms) | median per peer (ms) | "
        "publish call (ms) | empty poll (ms) | process CPU | machine CPU | incomplete |",
        "|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for x in runs:
        cells = [x["peers"], x["transport"], ms(x["median_all_s"]), ms(x["p95_all_s"]),
                 ms(x["median_per_peer_s"]), ms(x["median_publish_call_s"]), ms(x["median_empty_poll_s"]),
                 pct(x["process_cpu_share"]), pct(x["machine_cpu_share"]), x["incomplete_trials"]]
        md.append("| " + " | ".join(map(str, cells)) + " |")
    row = {(x["peers"], x["transport"]): x for x in runs}
    others = [k for k in result["transports"] if k != "memory"]
    if "memory" in result["transports"] and others:
        md += ["", "| N | transport | transport / memory, median all N | p95 all N | median per peer | "
                   "transport - memory, median all N (ms) |", "|---:|---|---:|---:|---:|---:|"]
        for n, k in ((n, k) for n in result["peers"] for k in others):
            x, m = row.get((n, k)), row.get((n, "memory"))
            if x is None or m is None:
                continue
            diff = None if None in (x["median_all_s"], m["median_all_s"]) else x["median_all_s"] - m["median_all_s"]
            cells = [n, k, ratio(x["median_all_s"], m["median_all_s"]), ratio(x["p95_all_s"], m["p95_all_s"]),
                     ratio(x["median_per_peer_s"], m["median_per_peer_s"]), ms(diff)]
            md.append("| " + " | ".join(map(str, cells)) + " |")
    missing = [f"N={n} {k}" for n in result["peers"] for k in result["transports"] if (n, k) not in row]
    if missing:
        md += ["", f"Not measured: {', '.join(missing)} (its process failed; see the run's output)."]
    md += [
        "",
        "*publish call*: until `transport.publish` returned (hivemind: the DHT store of the index "
        "record; libp2p: the gossipsub publish, run in the host's trio thread). *empty poll*: one "
        "receiver poll that found nothing new (hivemind: one DHT get_many over the rounds of the "
        "window; libp2p: a look into the inbox that gossip fills). *process CPU*: CPU time of the "
        "Python process that runs every node of the row over wall time during the trials (one core "
        "= 100%; the p2pd daemons are separate processes, the libp2p hosts' trio threads are "
        "not). *machine CPU*: share of all cores busy (every process, p2pd daemons included). "
        "Where either nears 100%, polls and fetches wait for the CPU rather than the network, and "
        "those latencies are an upper bound for nodes that each have their own machine.",
        "",
        f"Admission throughput, one node, {v['envelopes']} distinct envelopes of this batch:",
        "",
        "| path | envelopes/s | µs per envelope | accepted |",
        "|---|---:|---:|---:|",
        throughput_row("`Verifier.verify` (Ed25519 + peer id + clock + replay bookkeeping)",
                       v["verify"], v["envelopes"]),
        throughput_row("`SwarmExchange.admit` (parse + verify + decode + schema + task ids + token/text)",
                       v["admit"], v["envelopes"]),
        "",
        f"The full admission handles {v['admit']['records_per_s']:.0f} rollout records/s. "
        f"{result['machine']}, Python {result['python']}, load average at the end {result['load_avg_1m']:.2f}.",
    ]
    return md
